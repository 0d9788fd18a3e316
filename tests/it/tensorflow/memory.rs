//! Memory after a burst of large requests: once the server is idle, what the
//! allocators hold free (glibc's arenas under TensorFlow's image decoding,
//! mimalloc's segments under the server's own buffers) goes back to the
//! system, and the resident set, read from `/proc`, comes back near where
//! it was before the burst.

use crate::common;

use std::io::Cursor;
use std::time::{Duration, Instant};

use base64::Engine;
use common::process::start;
use common::repo_path;

/// How far above its resident set before the burst the server may stay
/// once idle: what large requests leave for good (TensorFlow's kernels and
/// caches for their shapes, thread stacks, what glibc keeps below its
/// arenas' tops). Measured here after the release, two bursts of eight at
/// once: +76 to +136 MiB; without the release it stayed +204 MiB.
const BOUND: u64 = 192 << 20;

fn resident_bytes(pid: u32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// A 32 × 32 PNG.
fn small_png() -> Vec<u8> {
    let image = image::GrayImage::from_pixel(32, 32, image::Luma([128]));
    let mut png = Vec::new();
    image
        .write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    png
}

/// A 3000 × 3000 PNG of noise (it does not compress), 9 MB.
fn noise_png() -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let pixels: Vec<u8> = (0..3000 * 3000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let image = image::GrayImage::from_raw(3000, 3000, pixels).unwrap();
    let mut png = Vec::new();
    image
        .write_to(&mut Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    png
}

#[test]
fn after_a_burst_of_large_image_requests_the_resident_set_comes_back_when_idle() {
    let model = repo_path("models/image_classifier");
    let server = start(&[
        "--rest_api_port=0",
        "--host=127.0.0.1",
        "--model_name=img",
        &format!("--model_base_path={}", model.display()),
    ]);
    let url = format!("{}/v1/models/img:predict", server.url);
    let encoded = base64::engine::general_purpose::STANDARD.encode(noise_png());
    let body = format!(r#"{{"instances": [{{"b64": "{encoded}"}}, {{"b64": "{encoded}"}}]}}"#);
    let client = common::patient_client();
    let post = |body: String| {
        let answer = client.post(&url).body(body).send().unwrap();
        assert_eq!(answer.status().as_u16(), 200);
    };
    // A small image first: the baseline is the server at rest, its first request served.
    let small = base64::engine::general_purpose::STANDARD.encode(small_png());
    let answer = client
        .post(&url)
        .body(format!(r#"{{"instances": [{{"b64": "{small}"}}]}}"#))
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    std::thread::sleep(Duration::from_secs(3));
    let before = resident_bytes(server.child.id());
    for _ in 0..2 {
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| post(body.clone()));
            }
        });
    }
    let peak = resident_bytes(server.child.id());
    // Polled: the server hands memory back after two idle seconds (and says
    // so), and the test waits as long as a loaded machine may take to get there.
    let started = Instant::now();
    let mut seen = Vec::new();
    while started.elapsed() < Duration::from_secs(60) {
        let now = resident_bytes(server.child.id());
        seen.push(now >> 20);
        let released = server
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("of freed memory handed back"));
        if released && now <= before + BOUND {
            eprintln!(
                "resident: {} MiB before, {} MiB after the burst, {} MiB when idle",
                before >> 20,
                peak >> 20,
                now >> 20
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!(
        "resident {} MiB before the burst, {} MiB after it; idle: {seen:?} MiB; released: {:?}",
        before >> 20,
        peak >> 20,
        server
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("handed back"))
            .collect::<Vec<_>>()
    );
}
