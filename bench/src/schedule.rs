//! The order of a bench's steps, worked out before the first one runs, so that the progress line
//! can say how many are left and what they are.

use crate::plan::Scenario;
use crate::progress;
use crate::runner::{RunId, throttle_label};
use crate::stack::{StackKind, Throttle};

/// One step of the bench: the apiserver's ceiling, or one stack through one scenario.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    Ceiling(usize),
    Run(RunId, Scenario),
}

impl Step {
    pub fn kind(&self) -> progress::Kind {
        match self {
            Step::Ceiling(_) => progress::Kind {
                stack: "none".into(),
                scenario: Scenario::Ceiling.to_string(),
                throttle: String::new(),
            },
            Step::Run(id, scenario) => progress::Kind {
                stack: id.kind.to_string(),
                scenario: scenario.to_string(),
                throttle: throttle_label(id.throttle),
            },
        }
    }
}

/// Every step, in the order they run: each run goes through the scenarios, each scenario
/// through the throttles, each throttle through the stacks asked for. The stacks alternate
/// which goes first, so that neither always gets the cooler machine; at rest nothing is
/// written, so the throttle cannot matter and it is measured under the first one only.
pub fn schedule(
    runs: usize,
    scenarios: &[Scenario],
    throttles: &[Throttle],
    stacks: &[String],
) -> Vec<Step> {
    let mut steps = Vec::new();
    for run in 0..runs {
        for &scenario in scenarios {
            if scenario == Scenario::Ceiling {
                steps.push(Step::Ceiling(run));
                continue;
            }
            for (t, &throttle) in throttles.iter().enumerate() {
                if matches!(scenario, Scenario::Rest(_)) && t > 0 {
                    continue;
                }
                let order = if run % 2 == 0 {
                    [StackKind::Upstream, StackKind::Ours, StackKind::Beside]
                } else {
                    [StackKind::Beside, StackKind::Ours, StackKind::Upstream]
                };
                for kind in order.into_iter().filter(|k| stacks.contains(&k.to_string())) {
                    steps.push(Step::Run(RunId { kind, throttle, run }, scenario));
                }
            }
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_alternate_and_rest_is_measured_under_one_throttle() {
        let stacks = vec!["ours".to_string(), "upstream".to_string()];
        let throttles = [Throttle::Defaults, Throttle::Off];
        let scenarios = [Scenario::Ceiling, Scenario::Burst(10), Scenario::Rest(5)];
        let steps = schedule(2, &scenarios, &throttles, &stacks);
        let names: Vec<String> = steps
            .iter()
            .map(|s| {
                let k = s.kind();
                format!("{} {} {}", k.stack, k.scenario, k.throttle)
            })
            .collect();
        let run = |first: &str, second: &str| {
            vec![
                "none ceiling ".to_string(),
                format!("{first} burst@10 defaults"),
                format!("{second} burst@10 defaults"),
                format!("{first} burst@10 no limit"),
                format!("{second} burst@10 no limit"),
                format!("{first} rest@5 defaults"),
                format!("{second} rest@5 defaults"),
            ]
        };
        let mut want = run("upstream", "ours");
        want.extend(run("ours", "upstream"));
        assert_eq!(names, want);
        assert!(matches!(steps[8], Step::Run(RunId { run: 1, .. }, Scenario::Burst(10))));
    }
}
