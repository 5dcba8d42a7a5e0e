//! Every configuration record reads the same way from JSON: a missing field takes the
//! documented default (also inside a partial nested object), a key that is not a setting is
//! an error naming it, and a record written as an array (fields by position) is refused.

use rebound_core::{
    BudgetConfig, BudgetUse, CompactionPolicy, MachineConfig, ProviderKind, RetryConfig,
    StreamDeadlines, TargetSpec,
};
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// The error reading `json` as a `T`, which must fail.
fn refused<T: DeserializeOwned + Debug>(json: &str) -> String {
    match serde_json::from_str::<T>(json) {
        Ok(read) => panic!("{json} was read as {read:?}"),
        Err(e) => e.to_string(),
    }
}

/// A typo of one real key: refused, naming the key.
fn typo_is_named<T: DeserializeOwned + Debug>(json: &str, key: &str) {
    let error = refused::<T>(json);
    assert!(
        error.contains(&format!("unknown field `{key}`")),
        "{json}: {error}"
    );
}

/// The record as an array of its fields' values: refused, saying an object was expected.
fn array_is_refused<T: DeserializeOwned + Debug>(json: &str) {
    let error = refused::<T>(json);
    assert!(
        error.contains("invalid type: sequence") && error.contains("expected an object"),
        "{json}: {error}"
    );
}

#[test]
fn the_machine_config_names_a_typo_and_refuses_fields_by_position() {
    typo_is_named::<MachineConfig>(r#"{"retyr": {"max_attempts": 9}}"#, "retyr");
    typo_is_named::<MachineConfig>(r#"{"retry": {"max_atempts": 9}}"#, "max_atempts");
    typo_is_named::<MachineConfig>(r#"{"stream": {"idle": 5}}"#, "idle");
    typo_is_named::<MachineConfig>(r#"{"retry_budget": {"max_wait": 5}}"#, "max_wait");
    typo_is_named::<MachineConfig>(r#"{"compaction": {"keep": 5}}"#, "keep");
    typo_is_named::<MachineConfig>(
        r#"{"targets": [{"provider": "anthropic", "model": "m", "window": 5}]}"#,
        "window",
    );
    array_is_refused::<MachineConfig>(r#"{"retry": [9, 100]}"#);
    array_is_refused::<MachineConfig>(r#"{"stream": [5000, 60000]}"#);
    array_is_refused::<MachineConfig>(r#"{"retry_budget": [5000]}"#);
    array_is_refused::<MachineConfig>(r#"{"targets": [["anthropic", "m"]]}"#);
    array_is_refused::<MachineConfig>("[]");
}

#[test]
fn a_partial_machine_config_takes_every_missing_setting_from_the_default() {
    let read: MachineConfig =
        serde_json::from_str(r#"{"retry": {"jitter": false}, "max_turns": 3}"#).unwrap();
    let expected = MachineConfig::default()
        .with_retry(RetryConfig::default().with_jitter(false))
        .with_max_turns(3);
    assert_eq!(read, expected);
    // The threshold past which a long server delay moves on to the next target: 30 s, as
    // documented, not "never".
    assert_eq!(read.retry.fallback_after_ms, 30_000);
    assert_eq!(
        serde_json::from_str::<MachineConfig>("{}").unwrap(),
        MachineConfig::default()
    );
    let read: MachineConfig =
        serde_json::from_str(r#"{"stream": {"idle_ms": 5000}, "retry_budget": {}}"#).unwrap();
    assert_eq!(read.stream.idle_ms, 5_000);
    assert_eq!(
        read.stream.progress_ms,
        StreamDeadlines::default().progress_ms
    );
    assert_eq!(read.retry_budget, Some(BudgetUse::default()));
}

#[test]
fn each_nested_record_reads_alone_as_it_reads_inside_the_machine_config() {
    typo_is_named::<RetryConfig>(r#"{"retyr": 1}"#, "retyr");
    array_is_refused::<RetryConfig>("[4]");
    typo_is_named::<StreamDeadlines>(r#"{"idle": 1}"#, "idle");
    array_is_refused::<StreamDeadlines>("[1, 2]");
    typo_is_named::<BudgetUse>(r#"{"max_wait": 1}"#, "max_wait");
    array_is_refused::<BudgetUse>("[1]");
    typo_is_named::<CompactionPolicy>(r#"{"keep": 1}"#, "keep");
    array_is_refused::<CompactionPolicy>("[1]");
    typo_is_named::<TargetSpec>(
        r#"{"provider": "openai", "model": "m", "modle": "n"}"#,
        "modle",
    );
    array_is_refused::<TargetSpec>(r#"["openai", "m"]"#);
    let target: TargetSpec =
        serde_json::from_str(r#"{"provider": "openai", "model": "m"}"#).unwrap();
    assert_eq!(target.provider, ProviderKind::OpenAi);
    assert_eq!(
        serde_json::from_str::<CompactionPolicy>("{}").unwrap(),
        CompactionPolicy::default()
    );
}

#[test]
fn the_budget_config_names_a_typo_and_takes_missing_settings_from_the_default() {
    typo_is_named::<BudgetConfig>(r#"{"capacty": 5}"#, "capacty");
    array_is_refused::<BudgetConfig>("[5]");
    let read: BudgetConfig = serde_json::from_str(r#"{"capacity": 5}"#).unwrap();
    let mut expected = BudgetConfig::default();
    expected.capacity = 5.0;
    assert_eq!(read, expected);
}

#[test]
fn what_is_written_reads_back_the_same() {
    let config = MachineConfig::resilient()
        .with_targets(vec![TargetSpec::new(ProviderKind::Anthropic, "m")]);
    let json = serde_json::to_string(&config).unwrap();
    assert_eq!(
        serde_json::from_str::<MachineConfig>(&json).unwrap(),
        config
    );
    let budget = BudgetConfig::default();
    let json = serde_json::to_string(&budget).unwrap();
    assert_eq!(serde_json::from_str::<BudgetConfig>(&json).unwrap(), budget);
}
