//! The commit `floe --version` reports: `git rev-parse --short=12 HEAD`, with `-dirty` when
//! tracked files differ from it; else the `FLOE_COMMIT` variable (a source tarball, a container
//! build with no .git); else `unknown`.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// The commit of the checkout this crate is built from, if it is one and git is here.
fn git_commit() -> Option<String> {
    let hash = git(&["rev-parse", "--short=12", "HEAD"])?;
    // Rebuild when HEAD moves: HEAD itself, the branch it points to (loose or packed), the
    // index (a commit or `git add`), and the sources (an edit makes the tree dirty).
    let mut watched = vec!["HEAD".to_string(), "packed-refs".into(), "index".into()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            let path = Path::new(&path);
            let path = if path.is_absolute() {
                path.to_path_buf()
            } else {
                std::env::current_dir().ok()?.join(path)
            };
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    if let Some(top) = git(&["rev-parse", "--show-toplevel"]) {
        for tracked in ["crates", "Cargo.toml", "Cargo.lock"] {
            let path = Path::new(&top).join(tracked);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some();
    Some(if dirty { format!("{hash}-dirty") } else { hash })
}

fn main() {
    println!("cargo:rerun-if-env-changed=FLOE_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git_commit()
        .or_else(|| {
            std::env::var("FLOE_COMMIT")
                .ok()
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty() && c.chars().all(|c| c.is_ascii_graphic()))
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=FLOE_BUILD_COMMIT={commit}");
}
