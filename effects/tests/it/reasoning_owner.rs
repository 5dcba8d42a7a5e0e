//! Encrypted reasoning goes back only to the target that produced it, against fake Responses
//! servers on 127.0.0.1 that enforce the rule as OpenAI does: each mints its reasoning for
//! its organisation and the request's key, and answers any other `encrypted_content` with
//! the API's 400 `invalid_encrypted_content`. A fallback to another organisation's endpoint,
//! and a session resumed under another key, send none of the first one's reasoning; reasoning
//! of an unknown owner (an old session) costs exactly one announced retry without it; and a
//! server that refuses every request fails the run cleanly after that one retry.

use crate::server;

use rebound_core::{
    ContentBlock, Conversation, FailureKind, GiveUp, MachineConfig, Message, ProviderKind,
    ProviderRetryInfo, RetryConfig, RunError, TargetSpec,
};
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig, Provider};
use rebound_effects::receiver::{Receiver, ReceiverError};
use rebound_effects::runner::{RunInput, Runner};
use rebound_effects::session::SessionStore;
use rebound_sim::fake::{FakeServer, FakeServerConfig, Outcome, RequestRecord};
use serde_json::Value;
use std::sync::{Arc, Mutex};

const R: ProviderKind = ProviderKind::OpenAiResponses;

async fn server(organization: &str) -> FakeServer {
    FakeServer::start(FakeServerConfig::healthy().with_organization(organization))
        .await
        .expect("starts")
}

fn provider(base_url: &str, key: &str) -> Box<dyn Provider> {
    let config = HttpProviderConfig::new(R, "gpt-test", ApiKey::new(key)).with_base_url(base_url);
    Box::new(HttpProvider::new(config).expect("valid"))
}

/// One attempt per target, no waiting: a target that fails hands over at once.
fn config(targets: usize) -> MachineConfig {
    MachineConfig::default()
        .with_retry(
            RetryConfig::default()
                .with_max_attempts(1)
                .with_initial_delay_ms(1)
                .with_jitter(false),
        )
        .with_targets(vec![TargetSpec::new(R, "gpt-test"); targets])
}

/// The retry notices a run showed.
#[derive(Clone, Default)]
struct Retries(Arc<Mutex<Vec<ProviderRetryInfo>>>);

impl Receiver for Retries {
    fn provider_retry(&mut self, info: &ProviderRetryInfo) -> Result<(), ReceiverError> {
        self.0.lock().expect("retries").push(info.clone());
        Ok(())
    }
}

fn reasoning_items(record: &RequestRecord) -> Vec<Value> {
    record.body.as_ref().expect("a JSON body")["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "reasoning")
        .cloned()
        .collect()
}

fn owned_reasoning(conversation: &Conversation) -> Vec<ContentBlock> {
    conversation
        .messages()
        .iter()
        .flat_map(|m| m.content.iter())
        .filter(|b| b.is_owned_reasoning())
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_fallback_to_another_organisations_endpoint_gets_none_of_the_first_ones_reasoning() {
    let first = server("org-first").await;
    let second = server("org-second").await;
    let first_url = first.base_url_for(R);
    let mut runner = Runner::new(
        config(2),
        vec![
            provider(&first_url, "sk-first"),
            provider(&second.base_url_for(R), "sk-second"),
        ],
    );
    runner.run(RunInput::text("hi")).await.expect("answered");
    assert_eq!(owned_reasoning(runner.current_conversation()).len(), 1);
    // The primary goes away: the next turn falls back to the other organisation.
    first.shutdown().await;
    let summary = runner
        .run(RunInput::text("and then?"))
        .await
        .expect("answered");
    assert_eq!(summary.stats.fallbacks, 1);
    assert_eq!(summary.stats.retries, 0, "nothing refused, nothing retried");
    let requests = second.requests();
    assert_eq!(requests.len(), 1);
    assert!(matches!(requests[0].outcome, Outcome::Answered { .. }));
    assert_eq!(reasoning_items(&requests[0]), Vec::<Value>::new());
    // The conversation keeps the first one's reasoning, and has the second one's.
    let kept = owned_reasoning(&summary.conversation);
    assert_eq!(kept.len(), 2);
    assert_ne!(kept[0].owner(), kept[1].owner());
    assert!(kept.iter().all(|b| b.owner().is_some()));
    second.shutdown().await;
}

#[tokio::test]
async fn a_session_resumed_under_another_key_sends_none_of_the_old_keys_reasoning() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("session.jsonl");
    let fake = server("org-one").await;
    let url = fake.base_url_for(R);
    {
        let (store, conversation) = SessionStore::open(&path).await.expect("opens");
        let mut runner = Runner::new(config(1), vec![provider(&url, "sk-old")])
            .persist(store)
            .conversation(conversation);
        runner.run(RunInput::text("hi")).await.expect("answered");
    }
    // The session file records the owner, and never the key.
    let text = std::fs::read_to_string(&path).expect("session");
    assert!(text.contains("\"owner\":\"openai-responses:"), "{text}");
    assert!(!text.contains("sk-old"));
    let (store, conversation) = SessionStore::open(&path).await.expect("reopens");
    assert_eq!(owned_reasoning(&conversation).len(), 1);
    let retries = Retries::default();
    let mut runner = Runner::new(config(1), vec![provider(&url, "sk-new")])
        .persist(store)
        .receiver(retries.clone())
        .conversation(conversation);
    let summary = runner.run(RunInput::text("again")).await.expect("answered");
    assert_eq!(summary.stats.retries, 0, "filtered, not refused");
    assert!(retries.0.lock().expect("retries").is_empty());
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(reasoning_items(&requests[1]), Vec::<Value>::new());
    assert!(matches!(requests[1].outcome, Outcome::Answered { .. }));
    fake.shutdown().await;
}

#[tokio::test]
async fn an_old_session_without_owners_resumed_under_another_key_costs_one_announced_retry() {
    let fake = server("org-one").await;
    let url = fake.base_url_for(R);
    let mut runner = Runner::new(config(1), vec![provider(&url, "sk-old")]);
    runner.run(RunInput::text("hi")).await.expect("answered");
    // As a session written before owners were recorded reads.
    let old: Vec<Message> = runner
        .current_conversation()
        .messages()
        .iter()
        .map(|m| {
            let mut m = (**m).clone();
            for b in &mut m.content {
                if let ContentBlock::Reasoning { owner, .. } = b {
                    *owner = None;
                }
            }
            m
        })
        .collect();
    let retries = Retries::default();
    let mut runner = Runner::new(config(1), vec![provider(&url, "sk-new")])
        .receiver(retries.clone())
        .conversation(Conversation::from(old));
    let summary = runner.run(RunInput::text("again")).await.expect("answered");
    let shown = retries.0.lock().expect("retries").clone();
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(shown[0].is_without_reasoning());
    assert_eq!(shown[0].kind, FailureKind::ReasoningRejected);
    let requests = fake.requests();
    assert_eq!(
        requests.len(),
        3,
        "the first run's, the refused one, its retry"
    );
    assert!(
        matches!(&requests[1].outcome, Outcome::Rejected { status: 400, .. }),
        "{:?}",
        requests[1].outcome
    );
    assert_eq!(reasoning_items(&requests[1]).len(), 1);
    assert_eq!(reasoning_items(&requests[2]), Vec::<Value>::new());
    assert!(matches!(requests[2].outcome, Outcome::Answered { .. }));
    // The old item is kept; the new answer's is the new key's.
    let kept = owned_reasoning(&summary.conversation);
    assert_eq!(kept.len(), 2);
    assert_eq!(kept[0].owner(), None);
    assert!(kept[1].owner().is_some());
    fake.shutdown().await;
}

/// OpenAI's body for encrypted content it cannot verify (openai/codex#8132).
const REFUSED: &str = r#"{"error":{"message":"The encrypted content gAAA...Rg== could not be verified.","type":"invalid_request_error","param":null,"code":"invalid_encrypted_content"}}"#;

#[tokio::test]
async fn a_server_that_always_refuses_the_reasoning_fails_the_run_after_one_retry() {
    let refusing = server::serve(|mut socket, _request| async move {
        let response = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
             x-request-id: req_refused\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{REFUSED}",
            REFUSED.len()
        );
        server::write(&mut socket, response.as_bytes()).await;
    })
    .await;
    let old = Conversation::from(vec![
        Message::user_text("hi"),
        Message::assistant(vec![
            ContentBlock::reasoning(serde_json::json!({
                "id": "rs_1", "type": "reasoning", "summary": [],
                "encrypted_content": "gAAAAB-from-elsewhere"
            })),
            ContentBlock::text("hello"),
        ]),
    ]);
    let retries = Retries::default();
    let mut runner = Runner::new(
        config(1),
        vec![provider(&format!("{}/v1", refusing.url()), "sk-k")],
    )
    .receiver(retries.clone())
    .conversation(old);
    let error = runner
        .run(RunInput::text("again"))
        .await
        .expect_err("refused twice");
    match &error {
        RunError::Provider {
            failure, reason, ..
        } => {
            assert_eq!(failure.kind, FailureKind::ReasoningRejected);
            assert_eq!(failure.status, Some(400));
            assert_eq!(failure.request_id.as_deref(), Some("req_refused"));
            assert_eq!(*reason, GiveUp::ReasoningRejectedAgain);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(error.kind(), "reasoning_rejected");
    assert!(!error.to_string().contains("sk-k"));
    assert_eq!(retries.0.lock().expect("retries").len(), 1);
    let requests = refusing.requests.lock().expect("requests").clone();
    assert_eq!(requests.len(), 2, "one retry, never a loop");
    let body = |raw: &[u8]| String::from_utf8_lossy(raw).into_owned();
    assert!(body(&requests[0]).contains("gAAAAB-from-elsewhere"));
    assert!(!body(&requests[1]).contains("\"reasoning\""));
}
