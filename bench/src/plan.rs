//! Which scenarios a run is made of, from the `--scenarios` list and the size flags: pure, so that
//! the names a user types are checked by a table.

use std::fmt;

/// One scenario at one size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// `n` claims created at once; time until all are Bound.
    Burst(usize),
    /// A burst of `n`, then some of them expanded, then all deleted.
    Lifecycle(usize),
    /// `volumes` Available PVs, then `claims` claims that each take one of them.
    Static { volumes: usize, claims: usize },
    /// `n` bound pairs, the stack settled: memory and CPU while nothing happens.
    Rest(usize),
    /// The apiserver's own write rate, no stack running.
    Ceiling,
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scenario::Burst(n) => write!(f, "burst@{n}"),
            Scenario::Lifecycle(n) => write!(f, "lifecycle@{n}"),
            Scenario::Static { volumes, claims } => write!(f, "static@{volumes}:{claims}"),
            Scenario::Rest(n) => write!(f, "rest@{n}"),
            Scenario::Ceiling => f.write_str("ceiling"),
        }
    }
}

/// The sizes a bare scenario name stands for.
#[derive(Debug, Clone, Default)]
pub struct Sizes {
    pub small_claims: usize,
    pub claims: usize,
    pub static_volumes: usize,
    pub rest_pairs: Vec<usize>,
    pub scale_claims: Vec<usize>,
    pub scale_volumes: usize,
}

/// The scenarios `names` stand for, in order. A bare name takes its size from `sizes`; a name
/// with `@` carries its own (`burst@5000`, `static@50000:10000`). `scale` is a burst at each of
/// `scale_claims`, then static binding of the largest of them against `scale_volumes` PVs.
pub fn scenarios(names: &[String], sizes: &Sizes) -> Result<Vec<Scenario>, String> {
    let mut out = Vec::new();
    for name in names {
        let (kind, size) = match name.split_once('@') {
            Some((kind, size)) => (kind, Some(size)),
            None => (name.as_str(), None),
        };
        let count = |s: &str| -> Result<usize, String> {
            match s.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("scenario {name:?}: {s:?} is not a positive count")),
            }
        };
        match (kind, size) {
            ("burst", None) => out.push(Scenario::Burst(sizes.small_claims)),
            ("burst", Some(n)) => out.push(Scenario::Burst(count(n)?)),
            ("lifecycle", None) => out.push(Scenario::Lifecycle(sizes.claims)),
            ("lifecycle", Some(n)) => out.push(Scenario::Lifecycle(count(n)?)),
            ("static", None) => {
                out.push(Scenario::Static { volumes: sizes.static_volumes, claims: sizes.claims })
            }
            ("static", Some(s)) => {
                let (volumes, claims) = s
                    .split_once(':')
                    .ok_or_else(|| format!("scenario {name:?}: want static@<volumes>:<claims>"))?;
                let (volumes, claims) = (count(volumes)?, count(claims)?);
                if claims > volumes {
                    return Err(format!("scenario {name:?}: more claims than PVs"));
                }
                out.push(Scenario::Static { volumes, claims });
            }
            ("rest", None) => out.extend(sizes.rest_pairs.iter().map(|&n| Scenario::Rest(n))),
            ("rest", Some(n)) => out.push(Scenario::Rest(count(n)?)),
            ("ceiling", None) => out.push(Scenario::Ceiling),
            ("scale", None) => {
                out.extend(sizes.scale_claims.iter().map(|&n| Scenario::Burst(n)));
                if let Some(&claims) = sizes.scale_claims.iter().max() {
                    out.push(Scenario::Static { volumes: sizes.scale_volumes.max(claims), claims });
                }
            }
            _ => {
                return Err(format!(
                    "unknown scenario {name:?}: burst, lifecycle, static, rest, ceiling or scale \
                     (burst@N, lifecycle@N, static@PVS:CLAIMS, rest@N for a size of their own)"
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes() -> Sizes {
        Sizes {
            small_claims: 100,
            claims: 1000,
            static_volumes: 10_000,
            rest_pairs: vec![1000, 10_000],
            scale_claims: vec![1000, 5000, 10_000],
            scale_volumes: 50_000,
        }
    }

    fn parse(list: &str) -> Result<Vec<Scenario>, String> {
        let names: Vec<String> = list.split(',').map(str::to_string).collect();
        scenarios(&names, &sizes())
    }

    #[test]
    fn names_stand_for_scenarios() {
        use Scenario::*;
        let table: &[(&str, Vec<Scenario>)] = &[
            ("burst", vec![Burst(100)]),
            ("burst@5000", vec![Burst(5000)]),
            ("lifecycle", vec![Lifecycle(1000)]),
            ("static", vec![Static { volumes: 10_000, claims: 1000 }]),
            ("static@50000:10000", vec![Static { volumes: 50_000, claims: 10_000 }]),
            ("rest", vec![Rest(1000), Rest(10_000)]),
            ("rest@50000", vec![Rest(50_000)]),
            ("ceiling,burst", vec![Ceiling, Burst(100)]),
            (
                "scale",
                vec![
                    Burst(1000),
                    Burst(5000),
                    Burst(10_000),
                    Static { volumes: 50_000, claims: 10_000 },
                ],
            ),
        ];
        for (list, want) in table {
            assert_eq!(parse(list).as_ref(), Ok(want), "{list}");
        }
    }

    #[test]
    fn nonsense_is_refused_with_the_name() {
        for list in ["bursts", "burst@0", "burst@x", "static@10", "static@10:20", "ceiling@3"] {
            let err = parse(list).expect_err(list);
            let name = list.split('@').next().unwrap_or(list);
            assert!(err.contains(name), "{list}: {err}");
        }
    }

    #[test]
    fn a_scenario_prints_as_it_is_typed() {
        for list in ["burst@100", "lifecycle@1000", "static@50000:10000", "rest@10", "ceiling"] {
            let parsed = parse(list).unwrap_or_default();
            assert_eq!(parsed.iter().map(|s| s.to_string()).collect::<Vec<_>>(), [list]);
        }
    }
}
