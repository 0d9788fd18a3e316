//! The answers' checks on their edge cases: near-zero outputs, embeddings,
//! sigmoids, class scores with too few rows, and one column among larger ones.

use crate::modes::agreement::{disagreement_bound, rows_needed, Agreement, Comparison};
use crate::runtime::precision::Tolerance;
use crate::tensor::{Tensor, TensorData};

fn floats(shape: &[usize], values: Vec<f32>) -> Tensor {
    Tensor::new(shape.to_vec(), TensorData::Float(values))
}

/// One output `key`, FP32's values against the mode's, in one shape.
fn compare(key: &str, shape: &[usize], fp32: Vec<f32>, mode: Vec<f32>) -> Agreement {
    let mut comparison = Comparison::default();
    comparison.add(&[key.to_string()], &[floats(shape, fp32)], &[floats(shape, mode)]);
    comparison.verdict(&Tolerance::default())
}

#[test]
fn a_single_near_zero_output_is_judged_on_its_absolute_error() {
    // 30% off a value of 1e-7 is nothing a caller can see...
    let close = compare("y", &[1], vec![1e-7], vec![1.3e-7]);
    assert!(close.refused.is_none(), "{close:?}");
    assert!(close.relative_error < 1e-3);
    // ...while 0.01 where FP32 says 1e-7 is a wrong answer.
    let wrong = compare("y", &[1], vec![1e-7], vec![0.01]);
    assert!(wrong.refused.unwrap().contains("strays 10.000"));
}

#[test]
fn each_column_is_judged_on_its_own_scale() {
    // Column 0 near 1000, column 1 near 1, off by 20% in the mode: within
    // 5% of the output's largest value, but not of its own column's.
    let fp32 = vec![1000.0, 1.0, 900.0, 0.8];
    let mode = vec![1000.0, 1.2, 900.0, 0.8];
    let agreement = compare("y", &[2, 2], fp32, mode);
    let why = agreement.refused.unwrap();
    assert!(why.starts_with("output 'y' strays 0.200 of a column's scale"), "{why}");
}

#[test]
fn an_embedding_gets_no_top_one_check() {
    // Two near-equal components whose order flips: an embedding's argmax means nothing.
    let fp32: Vec<f32> = (0..400).flat_map(|_| [0.5001, 0.5, -0.3]).collect();
    let mode: Vec<f32> = (0..400).flat_map(|_| [0.5, 0.5001, -0.3]).collect();
    let agreement = compare("embedding", &[400, 3], fp32, mode);
    assert_eq!((agreement.top1, agreement.decisions), (None, 0));
    assert!(agreement.refused.is_none(), "{agreement:?}");
}

#[test]
fn class_scores_are_found_by_their_sums_or_their_name() {
    let rows = 400;
    let probabilities: Vec<f32> = (0..rows).flat_map(|_| [0.7, 0.2, 0.1]).collect();
    let agreement = compare("output_0", &[rows, 3], probabilities.clone(), probabilities);
    assert_eq!((agreement.top1, agreement.decisions), (Some(1.0), rows));
    assert!(agreement.refused.is_none());
    // Logits sum to anything; their name says what they are. 2% flipped: refused.
    let logits: Vec<f32> = (0..rows).flat_map(|_| [3.0, 2.95, -1.0]).collect();
    let mut flipped = logits.clone();
    for row in 0..8 {
        flipped[row * 3 + 1] = 3.01;
    }
    let agreement = compare("logits", &[rows, 3], logits, flipped);
    assert_eq!(agreement.decisions, rows);
    let why = agreement.refused.unwrap();
    assert!(
        why.starts_with("98.0% of 400 decisions keep float32's top class"),
        "{why}"
    );
}

#[test]
fn too_few_rows_cannot_show_the_agreement() {
    assert_eq!(rows_needed(0.99), 299);
    assert!(disagreement_bound(0, 299) <= 0.01 && disagreement_bound(0, 298) > 0.01);
    let scores: Vec<f32> = (0..100).flat_map(|_| [0.6, 0.4]).collect();
    let agreement = compare("probabilities", &[100, 2], scores.clone(), scores);
    let why = agreement.refused.unwrap();
    assert!(why.starts_with("only 100 decisions"), "{why}");
    assert!(why.contains("299 are needed"), "{why}");
}

#[test]
fn a_sigmoid_keeps_each_rows_side_of_one_half() {
    let rows = 600;
    let fp32: Vec<f32> = (0..rows).map(|i| if i % 2 == 0 { 0.505 } else { 0.2 }).collect();
    // Within 5% of the column's scale, yet 10 rows cross 0.5.
    let mut mode = fp32.clone();
    for value in mode.iter_mut().step_by(2).take(10) {
        *value = 0.495;
    }
    let agreement = compare("y", &[rows, 1], fp32.clone(), mode);
    assert_eq!(agreement.decisions, rows);
    assert!(agreement.relative_error < 0.06, "{agreement:?}");
    let why = agreement.refused.unwrap();
    assert!(why.contains("keep float32's top class, side or value"), "{why}");
    // A regression output outside [0, 1] has no side to keep.
    let values: Vec<f32> = fp32.iter().map(|v| v * 10.0).collect();
    let agreement = compare("y", &[rows], values.clone(), values);
    assert_eq!((agreement.decisions, agreement.refused), (0, None));
}
