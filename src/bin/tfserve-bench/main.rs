//! Benchmark helpers driven by `benches/bench.py`:
//! `raw` measures a model through the same C API path tfserve uses, with no
//! HTTP; `ceiling` serves a fixed answer on the same actix-web stack, the
//! upper bound for any model server on this machine; `grpc` loads tfserve's
//! gRPC port with one Predict request; `decode` times decoding one request's
//! inputs from `tensor_content` and from JSON; `open` sends HTTP requests at a
//! fixed rate (open loop) and reports latency by status; `grpc-ceiling`
//! answers every gRPC Predict with a fixed answer, on `h2` or on tonic.

mod bench_grpc;
mod bench_open;
mod clock;
mod grpc_ceiling;
mod warmup_file;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use actix_web::{web, App, HttpResponse, HttpServer};
use clap::{Parser, Subcommand};
use tfserve::registry::discover_versions;
use tfserve::runtime::{LoadedModel, Model, SessionConfig};
use tfserve::signature::{SignatureSpec, DEFAULT_SIGNATURE};
use tfserve::tensor::TensorData;
use tfserve::warmup::synthetic_inputs;

#[derive(Parser)]
#[command(about = "tfserve benchmark helpers")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Session runs in a loop at each batch size; prints one JSON line per size.
    Raw {
        /// A SavedModel directory, or a base path whose latest version is used.
        #[arg(long)]
        model_dir: PathBuf,
        #[arg(long, value_delimiter = ',', default_value = "1,8,32,64")]
        batches: Vec<usize>,
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        #[arg(long, default_value_t = 0)]
        intra_op: i32,
        #[arg(long, default_value_t = 0)]
        inter_op: i32,
        /// Fill string inputs with this file's bytes (e.g. a JPEG for an image model).
        #[arg(long)]
        image: Option<PathBuf>,
        /// Compile the graph with XLA, as session_config's `xla_jit` does.
        #[arg(long)]
        xla: bool,
        /// The grappler rewrite `--mixed_precision` asks for: bfloat16 or float16.
        #[arg(long)]
        mixed_precision: Option<tfserve::runtime::precision::MixedPrecision>,
    },
    /// Sends one Predict request (synthetic inputs, numbers in tensor_content)
    /// from `concurrency` callers; prints a JSON line.
    Grpc {
        #[arg(long)]
        model_dir: PathBuf,
        #[arg(long)]
        model: String,
        #[arg(long, default_value = "http://127.0.0.1:8500")]
        target: String,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        #[arg(long, default_value_t = 1)]
        rows: usize,
        /// HTTP/2 connections the callers share (as wrk's connections, one per
        /// caller up to this many).
        #[arg(long, default_value_t = 16)]
        connections: usize,
        /// Write the call's body (the gRPC-framed request) to this file and
        /// exit, for another load generator (h2load -d).
        #[arg(long)]
        write_body: Option<PathBuf>,
    },
    /// Times decoding one request's inputs: gRPC TensorProtos, and a REST JSON body.
    Decode {
        #[arg(long)]
        model_dir: PathBuf,
        #[arg(long, default_value_t = 1)]
        rows: usize,
        /// A REST :predict body of the same input.
        #[arg(long)]
        rest_body: Option<PathBuf>,
    },
    /// POSTs one body at a fixed rate, whatever the answers take; prints a JSON
    /// line of counts and latencies (from when each request was due) by status.
    Open(bench_open::OpenLoop),
    /// Writes a warm-up file of seeded requests for the default signature.
    Warmup {
        #[arg(long)]
        model_dir: PathBuf,
        /// The model name the records carry.
        #[arg(long)]
        model: String,
        #[arg(long, default_value_t = 32)]
        rows: usize,
        #[arg(long, default_value_t = 10)]
        records: usize,
        #[arg(long)]
        out: PathBuf,
    },
    /// Answers every request with a fixed JSON body after reading it.
    Ceiling {
        #[arg(long, default_value_t = 8600)]
        port: u16,
        #[arg(long, default_value_t = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2))]
        workers: usize,
    },
    /// Answers every gRPC Predict with the fixed answer tfserve gives one row
    /// of `model_dir`'s default signature, after reading the request.
    GrpcCeiling {
        #[arg(long)]
        model_dir: PathBuf,
        #[arg(long)]
        model: String,
        #[arg(long, default_value_t = 8700)]
        port: u16,
        #[arg(long, value_enum, default_value = "h2")]
        stack: grpc_ceiling::Stack,
        /// Tokio worker threads (tfserve's --grpc_num_threads).
        #[arg(long, default_value_t = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2))]
        threads: usize,
    },
}

// Kept whole: one arm per subcommand, each passing its flags on.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    match Cli::parse().command {
        Command::Open(load) => bench_open::run(load),
        Command::Raw {
            model_dir,
            batches,
            seconds,
            intra_op,
            inter_op,
            image,
            xla,
            mixed_precision,
        } => {
            let image = image.map(std::fs::read).transpose()?;
            let config = SessionConfig {
                intra_op_parallelism: intra_op,
                inter_op_parallelism: inter_op,
                xla_jit: xla,
                mixed_precision,
                ..Default::default()
            };
            let (model, signature) = load_model(&model_dir, &config)?;
            for batch in batches {
                raw_runs(&model, &signature, batch, seconds, image.as_deref())?;
            }
            Ok(())
        }
        Command::Grpc {
            model_dir,
            model,
            target,
            concurrency,
            seconds,
            rows,
            connections,
            write_body,
        } => {
            let (_, signature) = load_model(&model_dir, &signature_only())?;
            let request = bench_grpc::request(&model, &signature, rows)?;
            if let Some(path) = write_body {
                return Ok(std::fs::write(path, bench_grpc::framed(&request)?)?);
            }
            bench_grpc::load(&target, request, concurrency, connections.min(concurrency), seconds)
        }
        Command::Decode {
            model_dir,
            rows,
            rest_body,
        } => {
            let (_, signature) = load_model(&model_dir, &signature_only())?;
            let request = bench_grpc::request("m", &signature, rows)?;
            let body = rest_body.map(std::fs::read).transpose()?;
            bench_grpc::decode_cost(&request, &signature, body.as_deref())
        }
        Command::GrpcCeiling {
            model_dir,
            model,
            port,
            stack,
            threads,
        } => {
            let (_, signature) = load_model(&model_dir, &signature_only())?;
            grpc_ceiling::serve(stack, port, threads, grpc_ceiling::answer(&model, &signature)?)
        }
        Command::Warmup {
            model_dir,
            model,
            rows,
            records,
            out,
        } => {
            let (_, signature) = load_model(&model_dir, &signature_only())?;
            Ok(warmup_file::write(&model, &signature, rows, records, &out)?)
        }
        Command::Ceiling { port, workers } => {
            actix_web::rt::System::new().block_on(async move {
                HttpServer::new(|| {
                    App::new().default_service(web::to(|_body: web::Bytes| async {
                        HttpResponse::Ok()
                            .content_type("application/json")
                            .body(r#"{"predictions":[3.5]}"#)
                    }))
                })
                .workers(workers)
                .bind(("127.0.0.1", port))?
                .run()
                .await
            })?;
            Ok(())
        }
    }
}

/// A model directory (or a base path: its latest version) and its default signature.
fn load_model(
    model_dir: &std::path::Path,
    config: &SessionConfig,
) -> Result<(LoadedModel, SignatureSpec), Box<dyn std::error::Error>> {
    let version_dir = discover_versions(model_dir)?
        .pop()
        .map(|(_, path)| path)
        .unwrap_or_else(|| model_dir.to_path_buf());
    let model = LoadedModel::load(&version_dir, &["serve".to_string()], config)?;
    let signature = model
        .signature(DEFAULT_SIGNATURE)
        .ok_or("no serving_default signature")?
        .as_ref()
        .clone();
    Ok((model, signature))
}

/// Session runs of `batch` rows for `seconds`, one after another; prints a JSON line.
fn raw_runs(
    model: &LoadedModel,
    signature: &SignatureSpec,
    batch: usize,
    seconds: f64,
    image: Option<&[u8]>,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut inputs = synthetic_inputs(signature, batch).ok_or("cannot build inputs for this signature")?;
    if let Some(bytes) = image {
        for input in &mut inputs {
            if let TensorData::String(values) = &mut input.data {
                values.iter_mut().for_each(|v| *v = bytes.to_vec());
            }
        }
    }
    // The first runs at a new size are slow (graph specialisation).
    for _ in 0..3 {
        model.run(&signature.name, inputs.clone())?;
    }
    let mut latencies = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs_f64(seconds) || latencies.len() < 3 {
        let inputs = inputs.clone();
        let call = Instant::now();
        model.run(&signature.name, inputs)?;
        latencies.push(call.elapsed().as_secs_f64());
    }
    // Session time only: cloning the inputs for the next call (77 MB at a
    // ResNet-50 batch of 128, page faults and all) is not the session's cost.
    let busy: f64 = latencies.iter().sum();
    latencies.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{{\"batch\": {batch}, \"calls\": {}, \"samples_per_s\": {:.1}, \"p50_ms\": {:.3}}}",
        latencies.len(),
        (batch * latencies.len()) as f64 / busy,
        latencies[latencies.len() / 2] * 1000.0
    );
    Ok(())
}

/// A session for reading a model's signature only: on the CPU, so a load
/// generator never takes GPU memory from the server it measures.
fn signature_only() -> SessionConfig {
    SessionConfig {
        cpu_only: true,
        ..Default::default()
    }
}
