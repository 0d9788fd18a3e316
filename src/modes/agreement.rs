//! How close a mode's answers are to FP32's on the same inputs, output by
//! output and column by column (a column: one position of an output's row).
//!
//! - Every float column's largest |mode − FP32| is divided by that column's
//!   scale (its largest |FP32|), or by [`ABSOLUTE_FLOOR`] where the column
//!   stays nearer zero than that: a column that is always about zero is
//!   judged on absolute error, so a near-zero answer cannot blow the ratio up.
//! - Class scores keep their top class: outputs shaped `[rows, …, classes]`
//!   whose name says so (`prob`, `softmax`, `logit`, `score`) or whose FP32
//!   vectors are probabilities (non-negative, summing to 1). Embeddings and
//!   other vectors get no top-1 check.
//! - A single-column output of probabilities (a sigmoid: FP32's values in
//!   [0, 1], on both sides of 0.5 or named as scores) keeps each row's side
//!   of 0.5; one named a logit keeps its sign.
//! - Integer, boolean and string outputs keep every value.
//! - A non-finite value where FP32's is finite, or a different shape,
//!   refuses the mode outright.
//!
//! The discrete checks (top class, side, exact value) are judged by the
//! one-sided 95 % Clopper–Pearson upper bound of the disagreeing share,
//! which must stay within 1 − `min_top1_agreement`: at the default 99 %,
//! that takes at least [`rows_needed`] = 299 decisions even with none
//! disagreeing, and fewer refuse the mode, saying how many more to provide.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::rounds::binomial_at_most;
use crate::runtime::precision::Tolerance;
use crate::tensor::{Tensor, TensorData};

/// Below this magnitude a column is judged on its absolute error.
pub const ABSOLUTE_FLOOR: f64 = 1e-3;
/// The confidence of the disagreement bound.
const CONFIDENCE: f64 = 0.95;
/// What an output's name says when it holds class scores.
const CLASS_WORDS: [&str; 4] = ["prob", "softmax", "logit", "score"];
/// How far a probability vector's sum may be from 1.
const SUM_SLACK: f64 = 1e-3;

/// What one mode's answers were, against FP32's, over every probe.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    /// The largest column error over any float output, each column's
    /// |mode − FP32| over its scale (floored at `ABSOLUTE_FLOOR`).
    pub relative_error: f64,
    /// The share of discrete decisions (top class, side of a threshold,
    /// exact value) agreeing with FP32's; `None` when no output has them.
    pub top1: Option<f64>,
    /// How many discrete decisions were compared.
    #[serde(default)]
    pub decisions: usize,
    /// Why the answers are out of tolerance; `None`: within it.
    pub refused: Option<String>,
}

/// One float column's largest FP32 magnitude and largest difference.
#[derive(Clone, Copy, Default)]
struct Column {
    scale: f64,
    difference: f64,
}

/// Accumulates the comparison of each probe's outputs.
#[derive(Default)]
pub struct Comparison {
    /// Per output and row length, each column's scale and difference.
    columns: BTreeMap<(String, usize), Vec<Column>>,
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
        let width = shape.iter().skip(1).product::<usize>().max(1);
        let columns = self
            .columns
            .entry((key.to_string(), width))
            .or_insert_with(|| vec![Column::default(); width]);
        for (i, (&want, &have)) in expected.iter().zip(got).enumerate() {
            if want.is_finite() && !have.is_finite() {
                self.broken = Some(format!(
                    "output '{key}' has {have} where float32's is {want} (the mode's range overflows)"
                ));
                return;
            }
            let column = &mut columns[i % width];
            let same_special = want == have || (want.is_nan() && have.is_nan());
            let difference = if same_special { 0.0 } else { (want - have).abs() };
            if want.is_finite() {
                column.scale = column.scale.max(want.abs());
            }
            if difference > column.difference || difference.is_nan() {
                column.difference = if difference.is_nan() { f64::INFINITY } else { difference };
            }
        }
        let last = shape.last().copied().unwrap_or(1);
        if shape.len() >= 2 && last >= 2 && class_scores(key, expected, last) {
            for (want, have) in expected.chunks(last).zip(got.chunks(last)) {
                self.compared += 1;
                self.agreeing += usize::from(argmax(want) == argmax(have));
            }
        } else if width == 1 {
            let name = key.to_lowercase();
            let probability = expected.iter().all(|v| (0.0..=1.0).contains(v))
                && (CLASS_WORDS.iter().chain(&["sigmoid"]).any(|w| name.contains(w))
                    || (expected.iter().any(|v| *v >= 0.5) && expected.iter().any(|v| *v < 0.5)));
            let side: Option<fn(f64) -> bool> = if probability {
                Some(|v| v >= 0.5)
            } else if name.contains("logit") {
                Some(|v| v >= 0.0)
            } else {
                None
            };
            if let Some(side) = side {
                self.compared += expected.len();
                self.agreeing += expected.iter().zip(got).filter(|(w, h)| side(**w) == side(**h)).count();
            }
        }
    }

    /// The worst column: its output's name and its error over its scale.
    fn worst(&self) -> (String, f64) {
        let mut worst = (String::new(), 0.0);
        for ((key, _), columns) in &self.columns {
            for column in columns {
                let error = column.difference / column.scale.max(ABSOLUTE_FLOOR);
                if error > worst.1 {
                    worst = (key.clone(), error);
                }
            }
        }
        worst
    }

    /// The verdict against `tolerance`.
    pub fn verdict(self, tolerance: &Tolerance) -> Agreement {
        let (worst_output, relative_error) = self.worst();
        let top1 = (self.compared > 0).then(|| self.agreeing as f64 / self.compared as f64);
        let allowed = 1.0 - tolerance.min_top1_agreement;
        let refused = self.broken.or_else(|| {
            if relative_error > tolerance.max_relative_error {
                return Some(format!(
                    "output '{worst_output}' strays {relative_error:.3} of a column's scale from float32's (tolerance {})",
                    tolerance.max_relative_error
                ));
            }
            let share = top1?;
            let disagreeing = self.compared - self.agreeing;
            let bound = disagreement_bound(disagreeing, self.compared);
            (bound > allowed).then(|| {
                let needed = rows_needed(tolerance.min_top1_agreement);
                if disagreeing == 0 {
                    format!(
                        "only {} decisions (top classes, sides, exact values) to compare; {needed} are needed to show \
                         {:.1}% agreement at 95% confidence: ship more warm-up requests or capture more",
                        self.compared,
                        tolerance.min_top1_agreement * 100.0
                    )
                } else {
                    format!(
                        "{:.1}% of {} decisions keep float32's top class, side or value: the disagreeing share may be \
                         {:.2}% (95% bound), over the {:.1}% allowed",
                        share * 100.0,
                        self.compared,
                        bound * 100.0,
                        allowed * 100.0
                    )
                }
            })
        });
        Agreement {
            relative_error,
            top1,
            decisions: self.compared,
            refused,
        }
    }
}

/// Whether an output's vectors along its last axis (`classes` long) are class scores.
fn class_scores(key: &str, expected: &[f64], classes: usize) -> bool {
    let name = key.to_lowercase();
    if CLASS_WORDS.iter().any(|word| name.contains(word)) {
        return true;
    }
    expected
        .chunks(classes)
        .all(|row| row.iter().all(|v| *v >= 0.0) && (row.iter().sum::<f64>() - 1.0).abs() <= SUM_SLACK)
}

/// The fewest decisions that, all agreeing, show `min_agreement` at 95 % confidence.
pub fn rows_needed(min_agreement: f64) -> usize {
    if min_agreement <= 0.0 {
        return 0;
    }
    if min_agreement >= 1.0 {
        return usize::MAX;
    }
    ((1.0 - CONFIDENCE).ln() / min_agreement.ln()).ceil() as usize
}

/// The one-sided Clopper–Pearson upper bound of a share seen `k` times in `n`.
pub fn disagreement_bound(k: usize, n: usize) -> f64 {
    if n == 0 || k >= n {
        return 1.0;
    }
    let (mut low, mut high) = (k as f64 / n as f64, 1.0);
    for _ in 0..60 {
        let mid = 0.5 * (low + high);
        if binomial_at_most(k, n, mid) > 1.0 - CONFIDENCE {
            low = mid;
        } else {
            high = mid;
        }
    }
    high
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
