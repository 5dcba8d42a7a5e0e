//! The outage experiment is a pure function of its configuration and seed.

use rebound_study::compare::{run_experiment, ExperimentConfig};

fn small(seed: u64) -> ExperimentConfig {
    ExperimentConfig::default().with_seed(seed).with_agents(40)
}

#[test]
fn the_experiment_gives_the_same_report_twice_for_a_seed() {
    for seed in [1, 7] {
        let first = run_experiment(&small(seed)).expect("the simulator runs");
        let second = run_experiment(&small(seed)).expect("the simulator runs");
        assert_eq!(first, second, "seed {seed}");
        assert_eq!(first.to_string(), second.to_string(), "seed {seed}");
    }
}

#[test]
fn the_report_has_a_row_per_model_and_policy_in_order() {
    let config = small(3);
    let report = run_experiment(&config).expect("the simulator runs");
    let expected: Vec<(String, String)> = config
        .models
        .iter()
        .flat_map(|m| {
            config
                .policies
                .iter()
                .map(move |p| (m.name.clone(), p.to_string()))
        })
        .collect();
    let got: Vec<(String, String)> = report
        .rows
        .iter()
        .map(|r| (r.model.clone(), r.policy.to_string()))
        .collect();
    assert_eq!(got, expected);
    assert!(report.rows.iter().all(|r| r.agents == config.agents));
}
