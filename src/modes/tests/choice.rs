//! Whole trials on the simulated clock: what is chosen, refused and kept.

use std::sync::atomic::Ordering;

use super::*;

fn all_candidates() -> Vec<Mode> {
    candidates(&[MixedPrecision::Bfloat16, MixedPrecision::Float16], true)
}

/// Seconds per row: FP32 10 ms; XLA 2% off; bfloat16 30% off, 35% with
/// XLA; float16 not built in.
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

fn trial_of(name: &str, loader: ModeLoader) -> (Decision, Arc<ModeLoader>) {
    let dir = version_with_warmup(name, 8);
    let loader = Arc::new(loader);
    let decision = decided(&plan(loader.clone(), &dir, all_candidates(), None), &loader.clock);
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    (decision, loader)
}

fn verdict(decision: &Decision, name: &str) -> String {
    let tried = decision.tried.iter().find(|t| t.mode.name() == name);
    tried.map(|t| t.verdict.clone()).unwrap_or_default()
}

#[test]
fn xla_is_a_candidate_only_where_batches_are_padded() {
    let names = |xla| {
        candidates(&[MixedPrecision::Bfloat16], xla)
            .iter()
            .map(Mode::name)
            .collect::<Vec<_>>()
    };
    assert_eq!(names(true), ["float32", "float32+xla", "bfloat16", "bfloat16+xla"]);
    assert_eq!(names(false), ["float32", "bfloat16"]);
}

#[test]
fn the_fastest_mode_within_tolerance_is_chosen() {
    let (decision, _) = trial_of(
        "fastest",
        ModeLoader::new(typical, |mode, x| rounded(mode, x * 2.0 + 1.0)),
    );
    let report = decision.report("m", 1);
    assert_eq!(
        decision.chosen,
        Mode {
            precision: BF16,
            xla: true
        },
        "{report}"
    );
    assert!((decision.speedup - 10.0 / 6.5).abs() < 1e-6, "{report}");
    // The probes: where they came from, then the timed batches (8 rows at size 8).
    assert!(
        decision.probes[0].starts_with("its warm-up requests (8 rows compared)"),
        "{report}"
    );
    assert_eq!(decision.probes[1..], ["serving_default × 1", "serving_default × 8"]);
    assert!(
        verdict(&decision, "float32+xla").starts_with("not 5% faster than float32"),
        "{report}"
    );
    assert!(verdict(&decision, "float16").starts_with("failed: "), "{report}");
    assert!(
        report.contains("runs with bfloat16+xla: 1.54× float32's speed"),
        "{report}"
    );
}

#[test]
fn a_mode_that_breaks_the_answers_is_refused_however_fast() {
    // (x + 1000) − 1000: bfloat16 keeps 8 significant bits, so x is lost.
    let broken = |mode, x| rounded(mode, rounded(mode, x + 1000.0) - 1000.0);
    let (decision, _) = trial_of("broken", ModeLoader::new(typical, broken));
    assert_eq!(decision.chosen, Mode::FLOAT32, "{}", decision.report("m", 1));
    let bf16 = verdict(&decision, "bfloat16");
    assert!(bf16.starts_with("refused: output 'y' strays"), "{bf16}");
    assert_eq!(
        decision.reason,
        "no other mode is both within tolerance and surely faster"
    );
}

#[test]
fn float16_overflow_is_refused_even_within_the_relative_error() {
    fn cost(mode: Mode, _: usize) -> Option<f64> {
        Some(if mode.precision == FP16 { 0.001 } else { 0.010 })
    }
    let (decision, _) = trial_of("overflow", ModeLoader::new(cost, |mode, x| rounded(mode, 70000.0 + x)));
    assert_eq!(decision.chosen, Mode::FLOAT32);
    assert!(
        verdict(&decision, "float16").contains("overflows"),
        "{}",
        decision.report("m", 1)
    );
}

#[test]
fn a_mode_faster_by_less_than_the_gain_keeps_float32() {
    // bfloat16 3% faster, measured exactly: the upper bound is under 1.05.
    fn cost(mode: Mode, _: usize) -> Option<f64> {
        Some(if mode.precision.is_some() { 0.0097 } else { 0.010 })
    }
    let (decision, loader) = trial_of("slight", ModeLoader::new(cost, rounded));
    assert_eq!(decision.chosen, Mode::FLOAT32);
    let bf16 = decision.tried.iter().find(|t| t.mode.name() == "bfloat16").unwrap();
    // Five candidates: 8 rounds cannot bound a median at 1 − 5%/20; 16 can.
    assert_eq!(
        bf16.judged.unwrap().rounds,
        rounds::LOOKS[1],
        "decided at the first look that can"
    );
    assert!(bf16.verdict.starts_with("not 5% faster"), "{}", bf16.verdict);
    assert!(loader.loads.load(Ordering::SeqCst) >= 4);
}

#[test]
fn a_model_without_real_requests_stays_float32_and_says_what_to_provide() {
    let dir = std::env::temp_dir().join(format!("tfserve-modes-bare-{}/1", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let loader = Arc::new(ModeLoader::new(typical, rounded));
    let cache = dir.parent().unwrap().join("cache");
    let decision = decided(
        &plan(loader.clone(), &dir, all_candidates(), Some(cache.clone())),
        &loader.clock,
    );
    assert_eq!(decision.chosen, Mode::FLOAT32);
    assert!(
        decision.reason.contains("assets.extra/tf_serving_warmup_requests"),
        "{}",
        decision.reason
    );
    assert!(
        decision.reason.contains("--capture_tfrecord_prefix"),
        "{}",
        decision.reason
    );
    assert_eq!(loader.loads.load(Ordering::SeqCst), 0, "nothing loaded");
    assert!(!cache.exists(), "nothing kept: probes provided later measure");
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn captured_requests_are_probes_where_there_is_no_warm_up_file() {
    let dir = version_with_warmup("captured", 6);
    let captures = dir.parent().unwrap().join("captures");
    std::fs::create_dir_all(&captures).unwrap();
    std::fs::rename(
        dir.join("assets.extra/tf_serving_warmup_requests"),
        captures.join("log-1-1.tfrecord"),
    )
    .unwrap();
    let prefix = captures.join("log").display().to_string();
    let source = Source::find(&dir, std::slice::from_ref(&prefix));
    assert_eq!(source, Some(Source::Captured(prefix.clone())));
    let loader = Arc::new(ModeLoader::new(typical, rounded));
    let mut plan = plan(loader.clone(), &dir, all_candidates(), None);
    plan.source = source;
    let decision = decided(&plan, &loader.clock);
    assert!(
        decision.probes[0].starts_with(&format!("its requests captured under {prefix} (6 rows")),
        "{:?}",
        decision.probes
    );
    assert_eq!(decision.chosen.precision, BF16);
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// A server that runs a request during every other round, then unloads the version.
struct Busy {
    clock: Arc<SimClock>,
    rounds: std::sync::atomic::AtomicUsize,
    unload_after: usize,
}

impl Clock for Busy {
    fn seconds(&self) -> f64 {
        self.clock.seconds()
    }
}

impl Surroundings for Busy {
    fn wait_quiet(&self) -> Result<(), String> {
        if self.rounds.load(Ordering::SeqCst) >= self.unload_after {
            return Err("the version no longer serves".into());
        }
        Ok(())
    }

    fn disturbed(&self) -> bool {
        self.rounds.fetch_add(1, Ordering::SeqCst) % 2 == 0
    }
}

#[test]
fn disturbed_rounds_are_run_again_and_an_unloaded_version_abandons_its_trial() {
    let dir = version_with_warmup("busy", 4);
    let loader = Arc::new(ModeLoader::new(typical, rounded));
    let candidates = candidates(&[MixedPrecision::Bfloat16], false);
    let plan = plan(loader.clone(), &dir, candidates, None);
    let busy = Busy {
        clock: loader.clock.clone(),
        rounds: Default::default(),
        unload_after: 1000,
    };
    let decision = run(&plan, &busy).unwrap();
    let judged = decision.tried[1].judged.unwrap();
    assert_eq!(judged.rounds, rounds::LOOKS[0], "{}", decision.report("m", 1));
    assert_eq!(
        busy.rounds.load(Ordering::SeqCst),
        2 * rounds::LOOKS[0],
        "every other round thrown away"
    );
    let unloading = Busy {
        clock: loader.clock.clone(),
        rounds: Default::default(),
        unload_after: 3,
    };
    let abandoned = run(&plan, &unloading).unwrap_err();
    assert!(abandoned.0.contains("no longer serves"), "{abandoned:?}");
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn a_kept_decision_is_reused_and_a_changed_key_measures_again() {
    let dir = version_with_warmup("kept", 8);
    std::fs::create_dir_all(dir.join("variables")).unwrap();
    std::fs::write(dir.join("variables/variables.index"), b"weights").unwrap();
    let cache = dir.parent().unwrap().join("cache");
    let loader = Arc::new(ModeLoader::new(typical, rounded));
    let mut first = plan(loader.clone(), &dir, all_candidates(), Some(cache.clone()));
    assert!(first.kept().is_none());
    let measured = decided(&first, &loader.clock);
    let kept = first.kept().expect("kept");
    assert_eq!((kept.chosen, kept.tried.len()), (measured.chosen, measured.tried.len()));
    assert!(kept.reused.is_some());
    let digest = cache::saved_model_digest(&dir).unwrap();
    assert_eq!(cache::for_saved_model(&cache.join("modes"), &digest).len(), 1);
    // Other weights, other probes, another environment, another rule: another key.
    std::fs::write(dir.join("variables/variables.index"), b"retrained").unwrap();
    assert!(first.kept().is_none(), "other weights");
    std::fs::write(dir.join("variables/variables.index"), b"weights").unwrap();
    assert!(first.kept().is_some());
    for change in [
        |k: &mut Key| k.probes = "warm-up 00".into(),
        |k: &mut Key| k.environment = vec![("TF_ENABLE_ONEDNN_OPTS".into(), "0".into())],
        |k: &mut Key| k.rule += 1,
        |k: &mut Key| k.batch_threads += 1,
        |k: &mut Key| k.tags.push("gpu".into()),
    ] {
        let mut other = first.clone();
        change(&mut other.key);
        assert!(other.kept().is_none(), "{:?}", other.key);
    }
    first.key.tolerance.max_relative_error = 0.01;
    assert!(first.kept().is_none(), "another tolerance");
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn a_kept_decision_naming_another_saved_model_or_key_is_not_used() {
    let dir = version_with_warmup("planted", 8);
    let cache = dir.parent().unwrap().join("cache");
    let loader = Arc::new(ModeLoader::new(typical, rounded));
    let plan = plan(loader.clone(), &dir, all_candidates(), Some(cache.clone()));
    decided(&plan, &loader.clock);
    let digest = cache::saved_model_digest(&dir).unwrap();
    let (path, kept) = cache::for_saved_model(&cache.join("modes"), &digest).remove(0);
    // A file under this model's name that says it is another's (copied from
    // another model, or written by someone else), then one for another key.
    let planted = |entry: &cache::CachedDecision| {
        let mut planted = entry.clone();
        planted.decision.chosen = Mode::FLOAT32;
        planted.decision.reason = "planted".into();
        planted
    };
    let mut other_model = planted(&kept);
    other_model.saved_model = "0".repeat(64);
    let mut other_key = planted(&kept);
    other_key.setting.push_str("|other");
    for entry in [other_model, other_key] {
        cache::write(&path, &entry).unwrap();
        let error = cache::read_for(&path, &digest, &kept.setting).unwrap_err();
        assert!(error.contains("holds a decision for SavedModel"), "{error}");
        assert!(plan.kept().is_none());
    }
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}
