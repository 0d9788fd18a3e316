//! The `tfserve` binary: parse settings, start the server, run until SIGINT/SIGTERM.

// Request buffers are allocated on HTTP threads and freed on batch threads (and
// the other way round); mimalloc handles that cross-thread traffic far better
// than glibc's allocator (measured with benches/bench.py).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use tfserve::runtime::tf_log;
use tfserve::settings::{Cli, Command, LogFormat, Settings};

// Runs before libtensorflow's static initialisers, which log to stderr.
#[cfg(target_os = "linux")]
#[used]
#[link_section = ".preinit_array"]
static BEFORE_LIBRARIES: unsafe extern "C" fn(
    std::ffi::c_int,
    *const *const std::ffi::c_char,
    *const *const std::ffi::c_char,
) = tf_log::before_libraries;

fn main() -> std::process::ExitCode {
    let start_up_output = tf_log::restore_stderr();
    let filter = tf_log::server_log_filter();
    tf_log::follow_server_level(&filter);
    if let Err(error) = tfserve::logging::init(&filter) {
        eprintln!("tfserve: cannot install the logger: {error}");
    }
    let cli = match Cli::try_from_args(std::env::args_os()) {
        Ok(cli) => cli,
        Err(error) if error.kind() == clap::error::ErrorKind::DisplayVersion => {
            print!("{}", tfserve::runtime::build_info::report());
            return std::process::ExitCode::SUCCESS;
        }
        Err(error) => error.exit(),
    };
    let settings = match Settings::load(&cli) {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("tfserve: {err}");
            return std::process::ExitCode::from(2);
        }
    };
    tfserve::logging::use_json(settings.logging.log_format == LogFormat::Json);
    if settings.logging.log_format == LogFormat::Json {
        if let Err(error) = tfserve::logging::forward_stderr() {
            log::warn!("stderr stays as it is (TensorFlow's lines are not JSON): {error}");
        }
    }
    if let Err(err) = settings.apply_gpu_compile_cache() {
        eprintln!("tfserve: --gpu_compile_cache_dir: {err}");
        return std::process::ExitCode::from(2);
    }
    if let Some(dir) = Settings::apply_bundled_cuda_tools() {
        log::info!(
            "XLA compiles GPU kernels with the ptxas and libdevice in {}",
            dir.display()
        );
    }
    for line in start_up_output.lines().filter(|l| !l.trim().is_empty()) {
        log::debug!(target: "tensorflow", "{line}");
    }
    match &cli.command {
        Some(Command::Transform(args)) => return transform(&settings, args),
        Some(Command::Inspect(args)) => return inspect(&settings, args),
        _ => {}
    }
    match tfserve::run(&settings) {
        Ok(()) => {
            log::info!("shut down cleanly");
            exit_without_teardown(0)
        }
        Err(err) => {
            eprintln!("tfserve: {err}");
            exit_without_teardown(1)
        }
    }
}

/// Ends the process without running C++ static destructors: libtensorflow's
/// (and the CUDA libraries') tear down global state that their own thread
/// pools, still alive, may be using, which can crash a server that has
/// already answered every request. Everything tfserve owns is done by now.
fn exit_without_teardown(code: i32) -> ! {
    use std::io::Write;
    log::logger().flush();
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `_exit` takes no pointers and never returns.
    unsafe { libc::_exit(code) }
}

fn transform(settings: &Settings, args: &tfserve::transform::TransformArgs) -> std::process::ExitCode {
    // Served on an ephemeral loopback port while the job runs, so that
    // inference.py handlers calling context.rest_uri reach the models.
    let mut settings = settings.clone();
    settings.http.host = "127.0.0.1".into();
    settings.http.rest_api_port = Some(0);
    settings.http.port = None;
    let outcome = actix_web::rt::System::new().block_on(async {
        let running = tfserve::start(&settings).map_err(|e| e.to_string())?;
        let server = running.server.handle();
        actix_web::rt::spawn(running.server);
        let summary = tfserve::transform::run(&running.state.service, args).await;
        server.stop(true).await;
        summary.map_err(|e| e.to_string())
    });
    match outcome {
        Ok(summary) if summary.records_failed == 0 => std::process::ExitCode::SUCCESS,
        Ok(_) => std::process::ExitCode::from(1),
        Err(err) => {
            eprintln!("tfserve transform: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn inspect(settings: &Settings, args: &tfserve::inspect::InspectArgs) -> std::process::ExitCode {
    let target = match tfserve::inspect::target(&args.dir) {
        Ok(target) => target,
        Err(err) => {
            eprintln!("tfserve inspect: {err}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Some((base, version)) = &target.base_path {
        println!("{}: version {version} (the highest)\n", base.display());
    }
    match tfserve::inspect::report(&target.saved_model) {
        Ok(text) => print!("{text}"),
        Err(err) => {
            eprintln!("tfserve inspect: {err}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let cache_root = settings
        .models
        .model_cache_dir
        .clone()
        .unwrap_or_else(tfserve::storage::Storage::default_cache_root);
    match tfserve::inspect::modes_report(&target.saved_model, &cache_root) {
        Ok(text) => print!("{text}"),
        Err(err) => eprintln!("tfserve inspect: the modes chosen for it: {err}"),
    }
    let Some(body) = &args.run else {
        return std::process::ExitCode::SUCCESS;
    };
    let loader = match tfserve::server::start::tensorflow_loader(settings) {
        Ok(loader) => loader,
        Err(err) => {
            eprintln!("tfserve inspect: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match tfserve::inspect::run(settings, loader, &target, body, args.method.as_deref()) {
        Ok(answer) => {
            println!("{answer}");
            std::process::ExitCode::SUCCESS
        }
        Err((status, error)) => {
            println!("HTTP {status}: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
