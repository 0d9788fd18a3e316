//! TF Serving's classify and regress results as protos, from the rows a
//! signature's outputs hold: what the gRPC answers carry and what a request
//! log records.

use crate::proto::tensorflow::serving::{Class, ClassificationResult, Classifications, Regression, RegressionResult};

/// `rows` classifications of `per_row` classes each; a missing output leaves
/// its field at the proto's default, as TF Serving's classifier does.
pub fn classification_result(
    rows: usize,
    per_row: usize,
    labels: Option<&[Vec<u8>]>,
    scores: Option<&[f32]>,
) -> ClassificationResult {
    let classifications = (0..rows)
        .map(|row| Classifications {
            classes: (0..per_row)
                .map(|k| {
                    let i = row * per_row + k;
                    Class {
                        label: labels
                            .and_then(|l| l.get(i))
                            .map(|l| String::from_utf8_lossy(l).into_owned())
                            .unwrap_or_default(),
                        score: scores.and_then(|v| v.get(i)).copied().unwrap_or(0.0),
                    }
                })
                .collect(),
        })
        .collect();
    ClassificationResult { classifications }
}

/// One regression per value.
pub fn regression_result(values: &[f32]) -> RegressionResult {
    RegressionResult {
        regressions: values.iter().map(|&value| Regression { value }).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_pair_labels_with_scores_row_by_row() {
        let labels = vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()];
        let result = classification_result(2, 2, Some(&labels), Some(&[0.1, 0.9, 0.7, 0.3]));
        assert_eq!(result.classifications.len(), 2);
        assert_eq!(result.classifications[1].classes[0].label, "c");
        assert_eq!(result.classifications[1].classes[0].score, 0.7);
        let unlabelled = classification_result(1, 2, None, Some(&[0.5, 0.5]));
        assert_eq!(unlabelled.classifications[0].classes[1].label, "");
        assert_eq!(regression_result(&[1.5, 2.0]).regressions[1].value, 2.0);
    }
}
