//! The runtime the mock-backed tests run on, without TensorFlow: every
//! version directory loads as half_plus_three (`y = x / 2 + 3` on float `x`).

use std::path::Path;
use std::sync::Arc;

use tfserve::runtime::mock::{float_signature, invalid, MockModel};
use tfserve::runtime::{Loader, Model, RuntimeError, SessionConfig};
use tfserve::tensor::TensorData;

pub struct HalfPlusThree;

impl Loader for HalfPlusThree {
    fn load(&self, _dir: &Path, _tags: &[String], _session: &SessionConfig) -> Result<Arc<dyn Model>, RuntimeError> {
        let signature = float_signature("serving_default", &["x"], &["y"]);
        Ok(Arc::new(MockModel::new(vec![signature], |_, inputs| {
            let mut x = inputs.into_iter().next().ok_or_else(|| invalid("no input"))?;
            match &mut x.data {
                TensorData::Float(values) => values.iter_mut().for_each(|v| *v = *v / 2.0 + 3.0),
                other => return Err(invalid(&format!("x must be float, got {}", other.dtype()))),
            }
            Ok(vec![x])
        })))
    }
}
