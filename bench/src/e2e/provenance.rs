//! What a results folder ran: the commit (and whether the work tree differed from it) and our
//! image's name and digest, read from the OCI archive `make image` wrote.

use std::path::Path;
use std::process::Command;

/// A few Markdown lines naming the commit and the image.
pub fn describe(image: &Path) -> String {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let (name, digest) = image_digest(image).unwrap_or_else(|e| (e, "unknown".into()));
    format!(
        "- commit: {commit}{}\n- image: {name}, digest {digest} ({})\n",
        if dirty { " with local changes" } else { "" },
        image.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()
    )
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The archive's image name and the digest of what its index names (the manifest list, for
/// `make image`'s multi-architecture archive).
fn image_digest(image: &Path) -> Result<(String, String), String> {
    let out = Command::new("tar")
        .arg("-xOf")
        .arg(image)
        .arg("index.json")
        .output()
        .map_err(|e| format!("cannot read {}: {e}", image.display()))?;
    if !out.status.success() {
        return Err(format!("{} has no index.json", image.display()));
    }
    let index: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{}'s index.json: {e}", image.display()))?;
    let manifest = &index["manifests"][0];
    let digest = manifest["digest"].as_str().ok_or("no digest in index.json")?.to_string();
    let name = manifest["annotations"]["org.opencontainers.image.ref.name"]
        .as_str()
        .unwrap_or("unnamed")
        .to_string();
    Ok((name, digest))
}
