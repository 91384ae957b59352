//! The short run of every fuzz target, in `make test`: each input of the committed corpus
//! (`fuzz/corpus/<target>/`, what `make fuzz` found and kept), then random inputs for
//! `FUZZ_SECONDS` (default 2) from seed `FUZZ_SEED` (default 1), printed for a replay.

use std::time::{Duration, Instant};

use super::TARGETS;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut inputs: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the corpus of {target} ({}): {e}", dir.display()))
        .flatten()
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(entry.path()).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, bytes)
        })
        .collect();
    inputs.sort();
    inputs
}

/// xorshift64*: enough to make bytes with, and the same from the same seed.
struct Bytes(u64);

impl Bytes {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn input(&mut self) -> Vec<u8> {
        let len = (self.next() % 512) as usize;
        (0..len).map(|_| (self.next() >> 56) as u8).collect()
    }
}

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn every_target_holds_on_its_corpus_and_on_random_input() {
    let seconds = setting("FUZZ_SECONDS", 2);
    let seed = setting("FUZZ_SEED", 1).max(1);
    for (target, run) in TARGETS {
        let inputs = corpus(target);
        assert!(!inputs.is_empty(), "the corpus of {target} is empty");
        for (name, bytes) in &inputs {
            eprintln!("{target}: corpus {name}");
            run(bytes);
        }
        let mut bytes = Bytes(seed);
        let started = Instant::now();
        let mut runs = 0u64;
        while started.elapsed() < Duration::from_secs(seconds) {
            run(&bytes.input());
            runs += 1;
        }
        eprintln!("{target}: {} corpus inputs, {runs} random (seed {seed})", inputs.len());
    }
}

#[test]
fn findings_stay_found() {
    // The StorageClass template that sliced backwards: `${pvc.annotations[']}`.
    super::secret_template(b"\x01${pvc.annotations[']}\x00ns");
    let template = crate::provision::parameters::SecretTemplate {
        name: "${pvc.annotations[']}".into(),
        namespace: "ns".into(),
    };
    let none = std::collections::BTreeMap::new();
    let input = crate::provision::secrets::TemplateInput {
        pv_name: "pv",
        pvc_name: "c",
        pvc_namespace: "ns",
        pvc_annotations: &none,
    };
    assert!(crate::provision::secrets::resolve(&template, &input).is_err());
}
