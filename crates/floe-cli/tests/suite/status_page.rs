//! The status page (`/`) in a real browser: headless Chromium (Debian `chromium`, installed by
//! scripts/test.sh) loads it from a running `floe serve`, takes a screenshot and dumps the DOM
//! it rendered. The test checks what the page shows (worker IDs, the lease, a key's segment
//! buffer, layout horizons, rates) and, in the screenshot's pixels, the readiness badge: green
//! while ready, red once the worker lease is lost.

use crate::common;
use crate::serving;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serving::http;

/// The badge colours of the page's style sheet.
const GREEN: [u8; 3] = [0x2a, 0x7d, 0x2a];
const RED: [u8; 3] = [0xbb, 0x22, 0x22];

fn chromium() -> &'static str {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("chromium (Debian: chromium) is installed by scripts/test.sh")
}

/// Chromium's headless flags for a throw-away profile (root needs --no-sandbox).
fn browser(profile: &Path) -> Command {
    let mut c = Command::new(chromium());
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--no-first-run",
        "--window-size=1400,1200",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// The DOM Chromium rendered for `url`.
fn dom(profile: &Path, url: &str) -> String {
    let out = browser(profile).args(["--dump-dom", url]).output().unwrap();
    assert!(
        out.status.success(),
        "chromium --dump-dom: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A screenshot of `url`: its pixels (RGB) and size.
fn screenshot(profile: &Path, url: &str, file: &Path) -> (Vec<[u8; 3]>, u32, u32) {
    let _ = std::fs::remove_file(file);
    let out = browser(profile)
        .arg(format!("--screenshot={}", file.display()))
        .arg(url)
        .output()
        .unwrap();
    assert!(
        out.status.success() && file.exists(),
        "chromium --screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(file).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = info.color_type.samples();
    let pixels = buf[..info.buffer_size()]
        .chunks(step)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    (pixels, info.width, info.height)
}

fn count(pixels: &[[u8; 3]], colour: [u8; 3]) -> usize {
    pixels.iter().filter(|p| **p == colour).count()
}

#[test]
fn the_status_page_shows_the_server_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let state_text = state.display().to_string();
    let profile = dir.path().join("chromium");
    let server = serving::start(&[
        "--state-dir",
        &state_text,
        "--store",
        "main=embedded",
        "--host",
        "h1",
        "--port",
        "4242",
    ]);
    for path in [
        "/v1/sequencer/main/orders?count=3",
        "/v1/ids/snowflake?count=10",
        "/v1/ids/sno",
    ] {
        let (code, body) = http(&server.http, "GET", path).unwrap();
        assert_eq!(code, 200, "{path}: {body}");
    }
    let (_, status) = http(&server.http, "GET", "/v1/status").unwrap();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let worker = status["generators"][0]["worker_id"].as_u64().unwrap();
    assert_eq!(status["generators"][0]["generator"], "snowflake default");

    let url = format!("http://{}/", server.http);
    let page = dom(&profile, &url);
    for shown in [
        "READY",
        "snowflake default",
        "held",
        "floe/h1:4242",
        "orders",
        "timestamp field ends",
        "years left",
        "Issue rates",
        "main",
        "embedded",
    ] {
        assert!(page.contains(shown), "the page shows {shown:?}:\n{page}");
    }
    assert!(!page.contains("NOT READY"), "{page}");
    // The generators table names the worker ID the server leased.
    let generators = &page[page.find("id=\"generators\"").unwrap()..];
    let row = &generators[generators.find("snowflake default").unwrap()..];
    assert!(row.contains(&format!("<td>{worker}</td>")), "{row}");
    // The 'orders' key's buffer: 3 of its segment's IDs used.
    let keys = &page[page.find("class=\"keys\"").unwrap()..];
    assert!(
        keys.contains("<td>orders</td><td>4</td>"),
        "next ID 4: {keys}"
    );

    let shot = dir.path().join("ready.png");
    let (pixels, width, height) = screenshot(&profile, &url, &shot);
    assert_eq!((width, height), (1400, 1200));
    assert!(
        count(&pixels, GREEN) > 200,
        "a green READY badge in the screenshot"
    );
    assert_eq!(count(&pixels, RED), 0, "nothing red while ready");

    // The lease lost (its record removed by hand): the page says so, in red.
    common::remove_record(std::path::Path::new(&state_text), "floe", "h1", 4242);
    let started = Instant::now();
    while http(&server.http, "GET", "/readyz").unwrap().0 != 503 {
        assert!(started.elapsed() < Duration::from_secs(15), "never fenced");
        std::thread::sleep(Duration::from_millis(100));
    }
    let page = dom(&profile, &url);
    assert!(page.contains("NOT READY"), "{page}");
    assert!(page.contains("lost (fenced)"), "{page}");
    let (pixels, _, _) = screenshot(&profile, &url, &dir.path().join("fenced.png"));
    assert!(
        count(&pixels, RED) > 200,
        "a red NOT READY badge in the screenshot"
    );
    assert_eq!(count(&pixels, GREEN), 0);
    server.term();
    server.wait(Duration::from_secs(30));
}
