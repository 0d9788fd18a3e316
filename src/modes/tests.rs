//! The mode choice's guarantees on a simulated clock: scripted models whose
//! runs advance the clock by a cost per mode and per row, and whose answers
//! are computed in the mode's precision.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::runtime::mock::{float_signature, MockModel};
use crate::runtime::RuntimeError;
use crate::signature::DEFAULT_SIGNATURE;
use crate::tensor::TensorData;

const BF16: Option<MixedPrecision> = Some(MixedPrecision::Bfloat16);
const FP16: Option<MixedPrecision> = Some(MixedPrecision::Float16);

#[derive(Default)]
struct SimClock(Mutex<f64>);

impl SimClock {
    fn advance(&self, seconds: f64) {
        *self.0.lock().unwrap() += seconds;
    }
}

impl Clock for Arc<SimClock> {
    fn seconds(&self) -> f64 {
        *self.0.lock().unwrap()
    }
}

type Cost = fn(Mode, usize) -> Option<f64>;
type Answer = fn(Mode, f32) -> f32;

/// Loads a model whose run of `rows` rows takes `cost(mode, rows)` seconds
/// (`None`: the mode fails to load) and answers `answer(mode, x)` per value.
struct ModeLoader {
    clock: Arc<SimClock>,
    cost: Cost,
    answer: Answer,
    /// Each output row's values: 1 (regression) or 2 (class scores).
    width: usize,
    loads: AtomicUsize,
}

impl ModeLoader {
    fn new(cost: Cost, answer: Answer) -> ModeLoader {
        ModeLoader {
            clock: Arc::default(),
            cost,
            answer,
            width: 1,
            loads: AtomicUsize::new(0),
        }
    }
}

impl Loader for ModeLoader {
    fn load(&self, _: &Path, _: &[String], session: &SessionConfig) -> Result<Arc<dyn Model>, RuntimeError> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        let mode = Mode {
            precision: session.mixed_precision,
            xla: session.xla_jit,
        };
        (self.cost)(mode, 1).ok_or_else(|| RuntimeError::Load {
            path: "v".into(),
            message: format!("{} is not built in", mode.name()),
        })?;
        let (clock, cost, answer, width) = (self.clock.clone(), self.cost, self.answer, self.width);
        let model = MockModel::new(
            vec![float_signature(DEFAULT_SIGNATURE, &["x"], &["y"])],
            move |_, inputs| {
                let x = &inputs[0];
                let rows = x.shape[0];
                clock.advance(cost(mode, rows).unwrap_or(0.0) * rows as f64);
                let TensorData::Float(values) = &x.data else {
                    return Err(crate::runtime::mock::invalid("x must be float"));
                };
                let y: Vec<f32> = values
                    .iter()
                    .flat_map(|&v| (0..width).map(move |k| answer(mode, v - k as f32 * 1e-3)))
                    .collect();
                let shape = if width == 1 { vec![rows] } else { vec![rows, width] };
                Ok(vec![Tensor::new(shape, TensorData::Float(y))])
            },
        );
        Ok(Arc::new(model))
    }
}

/// A value as the mode's precision keeps it.
fn rounded(mode: Mode, value: f32) -> f32 {
    match mode.precision {
        Some(MixedPrecision::Bfloat16) => half::bf16::from_f32(value).to_f32(),
        Some(MixedPrecision::Float16) => half::f16::from_f32(value).to_f32(),
        None => value,
    }
}

fn setup<'a>(loader: &'a ModeLoader, session: &'a SessionConfig, cache: Option<PathBuf>) -> Setup<'a> {
    Setup {
        loader,
        dir: Path::new("/nonexistent/1"),
        tags: &[],
        session,
        sizes: &[1, 8],
        candidates: candidates(&[MixedPrecision::Bfloat16, MixedPrecision::Float16]),
        cache_dir: cache,
        tensorflow: "mock".into(),
        device: "simulated".into(),
    }
}

fn choose_with(loader: &ModeLoader) -> Decision {
    let session = SessionConfig::default();
    choose("m", 1, &setup(loader, &session, None), &loader.clock)
}

/// Milliseconds per row: FP32 10; XLA 2% off; bfloat16 30% off, 35% with XLA;
/// float16 not built in.
fn typical(mode: Mode, _rows: usize) -> Option<f64> {
    let ms = match (mode.precision, mode.xla) {
        (None, false) => 10.0,
        (None, true) => 9.8,
        (Some(MixedPrecision::Bfloat16), false) => 7.0,
        (Some(MixedPrecision::Bfloat16), true) => 6.5,
        (Some(MixedPrecision::Float16), _) => return None,
    };
    Some(ms / 1000.0)
}

#[test]
fn every_fast_precision_is_tried_with_and_without_xla_after_fp32() {
    let names: Vec<String> = candidates(&[MixedPrecision::Bfloat16]).iter().map(Mode::name).collect();
    assert_eq!(names, ["float32", "float32+xla", "bfloat16", "bfloat16+xla"]);
}

#[test]
fn the_fastest_mode_within_tolerance_is_chosen() {
    let loader = ModeLoader::new(typical, |mode, x| rounded(mode, x * 2.0 + 1.0));
    let decision = choose_with(&loader);
    assert_eq!(
        decision.chosen,
        Mode {
            precision: BF16,
            xla: true
        }
    );
    assert!((decision.speedup - 10.0 / 6.5).abs() < 1e-9, "{}", decision.speedup);
    assert_eq!(decision.probes, ["serving_default × 1", "serving_default × 8"]);
    let verdict = |name: &str| {
        decision
            .tried
            .iter()
            .find(|t| t.mode.name() == name)
            .unwrap()
            .verdict
            .clone()
    };
    assert!(verdict("float32+xla").starts_with("less than 5% faster"));
    assert!(verdict("float16").starts_with("failed: "), "{}", verdict("float16"));
    let report = decision.report("m", 1);
    assert!(
        report.contains("runs with bfloat16+xla: 1.54× float32's speed"),
        "{report}"
    );
}

#[test]
fn a_mode_that_breaks_the_answers_is_refused_however_fast() {
    // (x + 1000) − 1000: bfloat16 keeps 8 significant bits, so x is lost.
    let loader = ModeLoader::new(typical, |mode, x| rounded(mode, rounded(mode, x + 1000.0) - 1000.0));
    let decision = choose_with(&loader);
    assert_eq!(decision.chosen, Mode::FLOAT32, "{}", decision.report("m", 1));
    let bf16 = &decision.tried[2];
    assert_eq!(bf16.mode.name(), "bfloat16");
    assert!(
        bf16.verdict.starts_with("refused: output 'y' strays"),
        "{}",
        bf16.verdict
    );
    assert!(bf16.speedup.unwrap() > 1.4, "measured, and faster, yet refused");
    assert_eq!(decision.reason, "no other mode is both within tolerance and faster");
}

#[test]
fn float16_overflow_is_refused_even_within_the_relative_error() {
    fn cost(mode: Mode, _: usize) -> Option<f64> {
        Some(if mode.precision == FP16 { 0.001 } else { 0.010 })
    }
    let loader = ModeLoader::new(cost, |mode, x| rounded(mode, 70000.0 + x));
    let decision = choose_with(&loader);
    assert_eq!(decision.chosen, Mode::FLOAT32);
    let fp16 = decision.tried.iter().find(|t| t.mode.precision == FP16).unwrap();
    assert!(fp16.verdict.contains("overflows"), "{}", fp16.verdict);
}

#[test]
fn a_mode_slower_on_any_probe_is_not_chosen_even_if_faster_overall() {
    // bfloat16 loses at one row (a rewrite's fixed cost) and wins at eight.
    fn cost(mode: Mode, rows: usize) -> Option<f64> {
        Some(match (mode.precision, rows) {
            (None, _) => 0.010,
            (_, 1) => 0.011,
            _ => 0.004,
        })
    }
    let loader = ModeLoader::new(cost, rounded);
    let decision = choose_with(&loader);
    assert_eq!(decision.chosen, Mode::FLOAT32);
    assert!(decision.tried[2]
        .verdict
        .starts_with("slower than float32 on serving_default × 1 (0.91×)"));
}

#[test]
fn class_scores_that_change_their_top_class_are_refused() {
    // Two scores 0.001 apart, the first the larger: bfloat16 rounds both to
    // one value near 100, and a tie's top class is the last.
    let mut loader = ModeLoader::new(typical, |mode, x| rounded(mode, 100.0 + x));
    loader.width = 2;
    let decision = choose_with(&loader);
    let bf16 = &decision.tried[2];
    let agreement = bf16.agreement.as_ref().unwrap();
    assert!(
        agreement.relative_error < 0.05,
        "within the relative error: {agreement:?}"
    );
    assert!(agreement.top1.unwrap() < 0.99);
    assert!(bf16.verdict.contains("keep float32's top class"), "{}", bf16.verdict);
    assert_eq!(decision.chosen.precision, None);
}

#[test]
fn a_model_without_probes_stays_fp32_and_says_why() {
    fn cost(_: Mode, _: usize) -> Option<f64> {
        Some(0.0)
    }
    let loader = ModeLoader::new(cost, |_, _| f32::NAN);
    let session = SessionConfig::default();
    let mut setup = setup(&loader, &session, None);
    setup.sizes = &[];
    let decision = choose("m", 1, &setup, &loader.clock);
    assert_eq!(decision.chosen, Mode::FLOAT32);
    assert!(
        decision.reason.starts_with("no input the model answers"),
        "{}",
        decision.reason
    );
}

#[test]
fn a_kept_decision_is_reused_and_a_changed_setting_measures_again() {
    let dir = std::env::temp_dir().join(format!("tfserve-modes-{}", std::process::id()));
    let model = dir.join("model/1");
    std::fs::create_dir_all(model.join("variables")).unwrap();
    std::fs::write(model.join("saved_model.pb"), b"graph").unwrap();
    std::fs::write(model.join("variables/variables.index"), b"weights").unwrap();
    let loader = ModeLoader::new(typical, rounded);
    let mut session = SessionConfig::default();
    let cache = Some(dir.join("cache"));
    let mut first = setup(&loader, &session, cache.clone());
    first.dir = &model;
    let measured = choose("m", 1, &first, &loader.clock);
    let loads = loader.loads.load(Ordering::SeqCst);
    assert_eq!(loads, 6, "every candidate loaded once");
    let again = choose("m", 1, &first, &loader.clock);
    assert_eq!(loader.loads.load(Ordering::SeqCst), loads, "nothing loaded");
    assert!(again.reused.is_some());
    let verdicts = |d: &Decision| d.tried.iter().map(|t| (t.mode, t.verdict.clone())).collect::<Vec<_>>();
    assert_eq!((again.chosen, verdicts(&again)), (measured.chosen, verdicts(&measured)));
    let digest = cache::saved_model_digest(&model).unwrap();
    let kept = cache::for_saved_model(&dir.join("cache/modes"), &digest);
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].1.device, "simulated");
    // Other weights, or another tolerance: another key.
    std::fs::write(model.join("variables/variables.index"), b"retrained").unwrap();
    choose("m", 1, &first, &loader.clock);
    assert_eq!(loader.loads.load(Ordering::SeqCst), 2 * loads);
    session.mode_tolerance.max_relative_error = 0.01;
    let mut stricter = setup(&loader, &session, cache);
    stricter.dir = &model;
    choose("m", 1, &stricter, &loader.clock);
    assert_eq!(loader.loads.load(Ordering::SeqCst), 3 * loads);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_kept_decision_naming_another_saved_model_or_setting_is_not_used() {
    let dir = std::env::temp_dir().join(format!("tfserve-modes-planted-{}", std::process::id()));
    let model = dir.join("model/1");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("saved_model.pb"), b"graph").unwrap();
    let loader = ModeLoader::new(typical, rounded);
    let session = SessionConfig::default();
    let mut setup = setup(&loader, &session, Some(dir.join("cache")));
    setup.dir = &model;
    let measured = choose("m", 1, &setup, &loader.clock);
    let loads = loader.loads.load(Ordering::SeqCst);
    let digest = cache::saved_model_digest(&model).unwrap();
    let (path, kept) = cache::for_saved_model(&dir.join("cache/modes"), &digest).remove(0);
    // A file under this model's name that says it is another's (copied from
    // another model, or written by someone else), then one for another setting.
    let planted = |entry: &cache::CachedDecision| {
        let mut planted = entry.clone();
        planted.decision.chosen = Mode::FLOAT32;
        planted.decision.reason = "planted".into();
        planted
    };
    let mut other_model = planted(&kept);
    other_model.saved_model = "0".repeat(64);
    let mut other_setting = planted(&kept);
    other_setting.setting.push_str("|other");
    for (round, entry) in [other_model, other_setting].iter().enumerate() {
        cache::write(&path, entry).unwrap();
        let error = cache::read_for(&path, &digest, &kept.setting).unwrap_err();
        assert!(error.contains("holds a decision for SavedModel"), "{error}");
        let decision = choose("m", 1, &setup, &loader.clock);
        assert_eq!(
            loader.loads.load(Ordering::SeqCst),
            (round + 2) * loads,
            "measured again"
        );
        assert!(decision.reused.is_none());
        assert_eq!(decision.chosen, measured.chosen);
        assert_ne!(decision.reason, "planted");
    }
    // The measurement replaced the file: the next start reuses it.
    assert!(choose("m", 1, &setup, &loader.clock).reused.is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Seeded traces of measurements: whatever the timings and agreements, the
/// choice is never refused, never slower than FP32 on a probe, and never
/// less than `MIN_GAIN` faster.
#[test]
fn the_choice_keeps_its_guarantees_over_seeded_traces() {
    let mut state = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let modes = candidates(&[MixedPrecision::Bfloat16, MixedPrecision::Float16]);
    for _ in 0..2000 {
        let probes = 1 + (next() * 4.0) as usize;
        let labels: Vec<String> = (0..probes).map(|i| format!("p{i}")).collect();
        let results: Vec<(Mode, Result<Measured, String>)> = modes
            .iter()
            .map(|&mode| {
                if mode != Mode::FLOAT32 && next() < 0.1 {
                    return (mode, Err("failed".into()));
                }
                let seconds = (0..probes).map(|_| 0.5 + next()).collect();
                let refused = (next() < 0.3).then(|| "out of tolerance".to_string());
                let agreement = Agreement {
                    relative_error: 0.0,
                    top1: None,
                    refused,
                };
                (mode, Ok(Measured { seconds, agreement }))
            })
            .collect();
        let fp32: Vec<f64> = results[0].1.as_ref().unwrap().seconds.clone();
        let decision = decide(labels, Tolerance::default(), results);
        let chosen = decision.tried.iter().find(|t| t.mode == decision.chosen).unwrap();
        if decision.chosen == Mode::FLOAT32 {
            continue;
        }
        assert!(chosen.agreement.as_ref().unwrap().refused.is_none());
        assert!(chosen.seconds.iter().zip(&fp32).all(|(s, f)| s <= f));
        assert!(decision.speedup >= 1.0 + MIN_GAIN);
        let best = decision
            .tried
            .iter()
            .filter(|t| t.verdict.starts_with("within") || t.verdict.starts_with("chosen"))
            .map(|t| t.speedup.unwrap())
            .fold(0.0, f64::max);
        assert_eq!(decision.speedup, best);
    }
}
