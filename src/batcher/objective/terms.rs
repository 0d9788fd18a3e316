//! The terms a queue's controller is given and answers in: the objective,
//! what to do with a request predicted late, and why it was.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// What a queue promises: `percentile` of its requests spend at most
/// `latency` from their arrival to their answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Objective {
    pub latency: Duration,
    pub percentile: f64,
}

/// What becomes of a request predicted to miss its deadline (Triton's
/// `timeout_action`): refused at once, or served from the late lane when no
/// request that can still be on time waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LateAction {
    Reject,
    #[default]
    Serve,
}

impl std::str::FromStr for LateAction {
    type Err = String;

    fn from_str(text: &str) -> Result<LateAction, String> {
        match text.to_ascii_lowercase().as_str() {
            "reject" => Ok(LateAction::Reject),
            "serve" => Ok(LateAction::Serve),
            other => Err(format!("must be reject or serve, got '{other}'")),
        }
    }
}

/// Why a request was predicted late: the time planned for it from now, the
/// time it had already spent since it arrived, and the rows waiting ahead.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Late {
    pub estimate: Duration,
    pub waited: Duration,
    pub waiting_rows: usize,
}

/// The controller's verdict on a request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admission {
    OnTime,
    /// Predicted late, and served: on the late lane, due by `due`.
    Delay {
        late: Late,
        due: Instant,
    },
    Refuse(Late),
}
