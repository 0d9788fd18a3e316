//! How close a mode's answers are to FP32's on the same inputs: the largest
//! error of each float output relative to its scale, and the share of rows
//! that keep their top class (outputs shaped `[rows, classes]`) or their
//! exact value (integer, boolean and string outputs). A non-finite value
//! where FP32's is finite, or a different shape, refuses the mode outright.

use serde::{Deserialize, Serialize};

use crate::runtime::precision::Tolerance;
use crate::tensor::{Tensor, TensorData};

/// What one mode's answers were, against FP32's, over every probe.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    /// The largest |mode − FP32| / max |FP32| over any float output.
    pub relative_error: f64,
    /// The share of rows (or discrete values) agreeing with FP32's; `None`
    /// when no output has classes or discrete values.
    pub top1: Option<f64>,
    /// Why the answers are out of tolerance; `None`: within it.
    pub refused: Option<String>,
}

/// Accumulates the comparison of each probe's outputs.
#[derive(Default)]
pub struct Comparison {
    relative_error: f64,
    worst_output: String,
    agreeing: usize,
    compared: usize,
    broken: Option<String>,
}

impl Comparison {
    /// Compares one probe's outputs, named by `keys`, with FP32's.
    pub fn add(&mut self, keys: &[String], reference: &[Tensor], candidate: &[Tensor]) {
        for ((key, fp32), mode) in keys.iter().zip(reference).zip(candidate) {
            if self.broken.is_some() {
                return;
            }
            if fp32.shape != mode.shape {
                self.broken = Some(format!(
                    "output '{key}' has shape {:?} where float32's is {:?}",
                    mode.shape, fp32.shape
                ));
                return;
            }
            match (floats(&fp32.data), floats(&mode.data)) {
                (Some(expected), Some(got)) => self.add_floats(key, &fp32.shape, &expected, &got),
                _ => {
                    self.compared += fp32.data.len();
                    self.agreeing += equal_elements(&fp32.data, &mode.data);
                }
            }
        }
    }

    fn add_floats(&mut self, key: &str, shape: &[usize], expected: &[f64], got: &[f64]) {
        let scale = expected
            .iter()
            .filter(|v| v.is_finite())
            .fold(0f64, |largest, v| largest.max(v.abs()))
            .max(f64::MIN_POSITIVE);
        for (&want, &have) in expected.iter().zip(got) {
            let same_special = want == have || (want.is_nan() && have.is_nan());
            if want.is_finite() && !have.is_finite() {
                self.broken = Some(format!(
                    "output '{key}' has {have} where float32's is {want} (the mode's range overflows)"
                ));
                return;
            }
            let error = if same_special { 0.0 } else { (want - have).abs() / scale };
            if error > self.relative_error || error.is_nan() {
                self.relative_error = if error.is_nan() { f64::INFINITY } else { error };
                self.worst_output = key.to_string();
            }
        }
        // Class scores: each row's largest entry is its answer.
        if let [rows, classes] = *shape {
            if classes >= 2 {
                for row in 0..rows {
                    let span = row * classes..(row + 1) * classes;
                    self.compared += 1;
                    self.agreeing += usize::from(argmax(&expected[span.clone()]) == argmax(&got[span]));
                }
            }
        }
    }

    /// The verdict against `tolerance`.
    pub fn verdict(self, tolerance: &Tolerance) -> Agreement {
        let top1 = (self.compared > 0).then(|| self.agreeing as f64 / self.compared as f64);
        let refused = self.broken.or_else(|| {
            if self.relative_error > tolerance.max_relative_error {
                Some(format!(
                    "output '{}' strays {:.3} of its scale from float32's (tolerance {})",
                    self.worst_output, self.relative_error, tolerance.max_relative_error
                ))
            } else {
                top1.filter(|&share| share < tolerance.min_top1_agreement).map(|share| {
                    format!(
                        "{:.1}% of rows keep float32's top class or value (tolerance {:.1}%)",
                        share * 100.0,
                        tolerance.min_top1_agreement * 100.0
                    )
                })
            }
        });
        Agreement {
            relative_error: self.relative_error,
            top1,
            refused,
        }
    }
}

fn floats(data: &TensorData) -> Option<Vec<f64>> {
    match data {
        TensorData::Float(v) => Some(v.iter().map(|&x| f64::from(x)).collect()),
        TensorData::Double(v) => Some(v.clone()),
        TensorData::Half(v) => Some(v.iter().map(|x| x.to_f64()).collect()),
        _ => None,
    }
}

fn equal_elements(a: &TensorData, b: &TensorData) -> usize {
    fn count<T: PartialEq>(a: &[T], b: &[T]) -> usize {
        a.iter().zip(b).filter(|(x, y)| x == y).count()
    }
    match (a, b) {
        (TensorData::Int8(a), TensorData::Int8(b)) => count(a, b),
        (TensorData::Int16(a), TensorData::Int16(b)) => count(a, b),
        (TensorData::Int32(a), TensorData::Int32(b)) => count(a, b),
        (TensorData::Int64(a), TensorData::Int64(b)) => count(a, b),
        (TensorData::UInt8(a), TensorData::UInt8(b)) => count(a, b),
        (TensorData::UInt16(a), TensorData::UInt16(b)) => count(a, b),
        (TensorData::UInt32(a), TensorData::UInt32(b)) => count(a, b),
        (TensorData::UInt64(a), TensorData::UInt64(b)) => count(a, b),
        (TensorData::Bool(a), TensorData::Bool(b)) => count(a, b),
        (TensorData::String(a), TensorData::String(b)) => count(a, b),
        _ => 0,
    }
}

fn argmax(row: &[f64]) -> Option<usize> {
    (0..row.len()).max_by(|&a, &b| row[a].total_cmp(&row[b]))
}
