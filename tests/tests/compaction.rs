//! Compaction end to end: the real runner over HTTP against the fake provider server, for
//! every wire format (Anthropic, OpenAI Chat Completions, OpenAI Responses) — a model-written
//! summary on overflow, its fallback to elision, a compaction before the provider refuses
//! anything, and usage totals as the server reported them. Every run's trace replays in the
//! simulator.

use rebound_core::compaction::{is_summary_request, SUMMARY_PREFIX};
use rebound_core::wire::parse_request;
use rebound_core::{CompactionMethod, ProviderKind, Role};
use rebound_sim::fake::Outcome;
use rebound_tests::{scenario, Play, Played, PROVIDERS};

fn received(played: &Played, provider: ProviderKind, index: usize) -> rebound_core::Conversation {
    let body = played.requests[index]
        .body
        .as_ref()
        .expect("requests carry JSON bodies");
    let bytes = serde_json::to_vec(body).expect("JSON serializes");
    parse_request(provider, &bytes)
        .expect("the runner sends valid requests")
        .conversation
}

fn summarising(s: rebound_sim::Scenario, provider: ProviderKind) -> Play {
    let mut play = Play::new(s, provider);
    play.config.compact_with = CompactionMethod::Summary;
    play
}

#[tokio::test]
async fn an_overflow_is_compacted_by_a_model_summary_and_the_retry_carries_it_with_the_latest_exchange(
) {
    for provider in PROVIDERS {
        let s = scenario(
            r#"{"history": {"turns": 6, "bytes": 4000},
                "summary": {"text": "SUMMARY: six files read, the bug is in file3."},
                "turns": [{"faults": [{"type": "context_overflow"}], "answer": {"text": "Fixed."}}]}"#,
        );
        let played = summarising(s, provider).run().await;
        assert!(played.result.is_ok(), "{provider}: {:?}", played.result);
        let outcomes: Vec<_> = played.requests.iter().map(|r| r.outcome.clone()).collect();
        assert_eq!(played.requests.len(), 3, "{provider}: {outcomes:?}");
        assert!(
            matches!(outcomes[1], Outcome::Summarized),
            "{provider}: {outcomes:?}"
        );
        assert!(is_summary_request(&received(&played, provider, 1)));
        let first = received(&played, provider, 0);
        let retried = received(&played, provider, 2);
        assert!(
            retried.approx_bytes() * 4 < first.approx_bytes(),
            "{provider}"
        );
        let head = &retried.messages()[0];
        assert_eq!(head.role, Role::User);
        assert!(head.text().starts_with(SUMMARY_PREFIX), "{provider}");
        assert!(head.text().contains("the bug is in file3"), "{provider}");
        // The latest exchange is intact: the history's last assistant message and the user's.
        let n = retried.len();
        assert_eq!(retried.messages()[n - 1].text(), "Fix the failing test.");
        assert_eq!(
            retried.messages()[n - 2].role,
            Role::Assistant,
            "{provider}: {retried:#?}"
        );
        let lines = played.lines("compaction");
        assert_eq!(lines.len(), 1, "{provider}");
        assert!(
            lines[0].starts_with("compaction overflow summary"),
            "{}",
            lines[0]
        );
        played.assert_trace_replays();
    }
}

#[tokio::test]
async fn a_failing_summariser_falls_back_to_elision_and_says_so() {
    for provider in PROVIDERS {
        let s = scenario(
            r#"{"history": {"turns": 6, "bytes": 4000},
                "summary": {"faults": [{"type": "http", "status": 400, "message": "bad summary"}]},
                "turns": [{"faults": [{"type": "context_overflow"}], "answer": {"text": "Fixed."}}]}"#,
        );
        let played = summarising(s, provider).run().await;
        assert!(played.result.is_ok(), "{provider}: {:?}", played.result);
        assert_eq!(played.requests.len(), 3, "{provider}");
        assert!(matches!(played.requests[1].outcome, Outcome::Fault { .. }));
        assert!(matches!(
            played.requests[2].outcome,
            Outcome::Answered { .. }
        ));
        let lines = played.lines("compaction");
        assert_eq!(lines.len(), 1, "{provider}");
        assert!(
            lines[0].starts_with("compaction overflow elide"),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("summary_error="), "{}", lines[0]);
        let retried = received(&played, provider, 2);
        assert!(!retried.messages()[0].text().starts_with(SUMMARY_PREFIX));
        played.assert_trace_replays();
    }
}

/// A run that reads a file, then answers: its first request fills most of a small window.
const FILLING: &str = r#"{"history": {"turns": 6, "bytes": 4000},
    "summary": {"text": "SUMMARY: keep going."},
    "turns": [{"answer": {"tool_calls": [{"name": "read", "input": {"path": "a"}}]}},
              {"answer": {"text": "Fixed."}}]}"#;

#[tokio::test]
async fn a_request_past_the_threshold_is_compacted_before_the_next_one_without_any_400() {
    for provider in PROVIDERS {
        let mut play = summarising(scenario(FILLING), provider);
        // The history is about 6,000 tokens as the fake server counts them (4 bytes each).
        play.context_window = Some(6_500);
        let played = play.run().await;
        assert!(played.result.is_ok(), "{provider}: {:?}", played.result);
        let outcomes: Vec<_> = played.requests.iter().map(|r| r.outcome.clone()).collect();
        assert!(
            matches!(
                outcomes.as_slice(),
                [
                    Outcome::Answered { turn: 0, .. },
                    Outcome::Summarized,
                    Outcome::Answered { turn: 1, .. }
                ]
            ),
            "{provider}: {outcomes:?}"
        );
        let lines = played.lines("compaction");
        assert_eq!(lines.len(), 1, "{provider}");
        assert!(
            lines[0].starts_with("compaction threshold summary"),
            "{}",
            lines[0]
        );
        assert!(
            played.lines("retry").is_empty(),
            "{provider}: no retry notice"
        );
        played.assert_trace_replays();

        // Without a known window, nothing compacts.
        let played = summarising(scenario(FILLING), provider).run().await;
        assert!(played.lines("compaction").is_empty(), "{provider}");
        assert_eq!(played.requests.len(), 2, "{provider}");
    }
}

#[tokio::test]
async fn run_totals_match_the_usage_the_server_reported() {
    for provider in PROVIDERS {
        let mut play = summarising(scenario(FILLING), provider);
        play.context_window = Some(6_500);
        let played = play.run().await;
        let Ok(summary) = &played.result else {
            panic!("{provider}: {:?}", played.result)
        };
        let reported: Vec<_> = played.requests.iter().filter_map(|r| r.usage).collect();
        assert_eq!(reported.len(), 3, "{provider}");
        let input: u64 = reported.iter().map(|u| u.input_tokens).sum();
        let output: u64 = reported.iter().map(|u| u.output_tokens).sum();
        assert!(input > 6_000 && output > 0, "{provider}: {input} {output}");
        let stats = &summary.stats;
        assert_eq!((stats.input_tokens, stats.output_tokens), (input, output));
        assert_eq!(stats.requests, 3);
        assert_eq!(stats.usage.len(), 3);
        assert_eq!(
            stats.usage.iter().map(|u| u.usage).collect::<Vec<_>>(),
            reported,
            "{provider}: per-request usage is kept in order"
        );
        assert_eq!(
            played.lines("totals"),
            [format!("totals requests=3 input={input} output={output}")],
            "{provider}"
        );
    }
}
