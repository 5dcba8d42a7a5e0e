//! Tool-call ids made to fit the target, against servers on 127.0.0.1 that enforce each rule
//! as the real APIs do: OpenAI's (one request never carries an id twice, at most 40
//! characters, every `tool` message answers a call of the request) and Mistral's (exactly
//! nine letters and digits). The conversation two turns of a server that numbers its calls
//! per message (`call_0` both times) would leave; the session keeps the originals.

use crate::server;

use rebound_core::wire::{StreamDelta, ToolIdForm};
use rebound_core::{ContentBlock, Conversation, Message, ProviderKind, ToolResultPart, ToolSpec};
use rebound_effects::provider::{
    ApiKey, HttpProvider, HttpProviderConfig, Provider, ProviderRequest,
};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

/// How a server checks the tool-call ids of a request.
#[derive(Clone, Copy)]
enum Rule {
    OpenAi,
    Mistral,
}

/// The calls' ids and the results' ids of a Chat or Responses request body, in order.
fn ids(body: &Value) -> (Vec<String>, Vec<String>) {
    let (mut calls, mut results) = (Vec::new(), Vec::new());
    let text = |v: &Value| v.as_str().unwrap_or("<none>").to_owned();
    for m in body["messages"].as_array().into_iter().flatten() {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            calls.push(text(&c["id"]));
        }
        if m["role"] == "tool" {
            results.push(text(&m["tool_call_id"]));
        }
    }
    for item in body["input"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("function_call") => calls.push(text(&item["call_id"])),
            Some("function_call_output") => results.push(text(&item["call_id"])),
            _ => {}
        }
    }
    (calls, results)
}

/// What the API would say to this request's ids: `None` when it takes them. The error
/// bodies are the APIs' own (OpenAI's shape; Mistral's as quoted in nearai/ironclaw#1241).
fn verdict(rule: Rule, body: &Value) -> Option<String> {
    let (calls, results) = ids(body);
    let mut seen = BTreeSet::new();
    for id in &calls {
        if !seen.insert(id.clone()) {
            return Some(format!(
                r#"{{"error":{{"message":"Duplicate value for 'tool_call_id' of {id} in message[3]","type":"invalid_request_error","param":"messages","code":null}}}}"#
            ));
        }
        let fits = match rule {
            Rule::OpenAi => id.len() <= 40,
            Rule::Mistral => id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()),
        };
        if !fits {
            return Some(match rule {
                Rule::OpenAi => format!(
                    r#"{{"error":{{"message":"Invalid 'messages[1].tool_calls[0].id': string too long. Got {id}","type":"invalid_request_error","param":"messages[1].tool_calls[0].id","code":"string_above_max_length"}}}}"#
                ),
                Rule::Mistral => format!(
                    r#"{{"object":"error","message":"Tool call id was {id} but must be a-z, A-Z, 0-9, with a length of 9.","type":"invalid_function_call","param":null,"code":"3280"}}"#
                ),
            });
        }
    }
    results.iter().find(|r| !seen.contains(*r)).map(|r| {
        format!(
            r#"{{"error":{{"message":"Invalid parameter: 'tool_call_id' {r} of 'tool' message does not answer a preceding 'tool_calls'.","type":"invalid_request_error","param":"messages","code":null}}}}"#
        )
    })
}

/// A Chat Completions stream answering with `text`; Responses' for the Responses API.
fn stream(kind: ProviderKind, text: &str) -> Vec<u8> {
    let text = serde_json::to_string(text).expect("a json string");
    let events = match kind {
        ProviderKind::OpenAiResponses => format!(
            "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":{text},\"sequence_number\":1}}\n\n\
             event: response.completed\ndata: {{\"type\":\"response.completed\",\"sequence_number\":2,\"response\":{{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"model\":\"m\",\"output\":[{{\"type\":\"message\",\"id\":\"msg_1\",\"role\":\"assistant\",\"status\":\"completed\",\"content\":[{{\"type\":\"output_text\",\"text\":{text},\"annotations\":[]}}]}}],\"usage\":{{\"input_tokens\":1,\"output_tokens\":1,\"total_tokens\":2}}}}}}\n\n"
        ),
        _ => format!(
            "data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":{text}}},\"finish_reason\":null}}]}}\n\n\
             data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n\
             data: [DONE]\n\n"
        ),
    };
    events.into_bytes()
}

/// A server enforcing `rule`: 400 with the API's body, or a stream answering "ok".
async fn enforcing(rule: Rule, kind: ProviderKind) -> server::Server {
    server::serve(move |mut socket, request| async move {
        let split = request.windows(4).position(|w| w == b"\r\n\r\n");
        let body: Value = split
            .and_then(|at| serde_json::from_slice(&request[at + 4..]).ok())
            .unwrap_or(Value::Null);
        let reply = match verdict(rule, &body) {
            Some(error) => format!(
                "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{error}",
                error.len()
            )
            .into_bytes(),
            None => [server::SSE_HEAD, &stream(kind, "ok")].concat(),
        };
        server::write(&mut socket, &reply).await;
    })
    .await
}

/// Two turns of a server that numbers calls per message: `call_0` in each, answered, then
/// a user's question.
fn numbered_per_message() -> Conversation {
    let call = |path: &str| ContentBlock::tool_use("call_0", "read", json!({"path": path}));
    let result = |text: &str| {
        ContentBlock::tool_result(
            "call_0",
            vec![ToolResultPart::Text { text: text.into() }],
            false,
        )
    };
    Conversation::from(vec![
        Message::user_text("read a, then b"),
        Message::assistant(vec![call("a")]),
        Message::user(vec![result("A")]),
        Message::assistant(vec![call("b")]),
        Message::user(vec![result("B")]),
        Message::user_text("and now?"),
    ])
}

async fn send(config: HttpProviderConfig, conversation: &Conversation) -> Result<String, String> {
    let provider = HttpProvider::new(config).map_err(|e| e.to_string())?;
    send_with(&provider, conversation).await
}

async fn send_with(provider: &HttpProvider, conversation: &Conversation) -> Result<String, String> {
    let tools = vec![ToolSpec {
        name: "read".into(),
        description: "Reads a file".into(),
        input_schema: json!({"type": "object"}),
    }];
    let mut sink = |_: StreamDelta<&str>| true;
    let request = ProviderRequest::new(conversation, &tools);
    tokio::time::timeout(Duration::from_secs(30), provider.send(request, &mut sink))
        .await
        .map_err(|_| "no answer".to_owned())?
        .map(|r| r.message.text())
        .map_err(|e| e.to_string())
}

fn config(kind: ProviderKind, url: String) -> HttpProviderConfig {
    HttpProviderConfig::new(kind, "m", ApiKey::new("sk-test")).with_base_url(url)
}

#[tokio::test]
async fn repeated_and_long_ids_fit_openais_rules_in_chat_and_responses() {
    let long = "chatcmpl-tool-8d6f0a3c2b1e4f5a9c7d6e5f4a3b2c1d";
    // And a third turn whose id is too long for OpenAI (vLLM's form).
    let mut conversation = numbered_per_message();
    conversation.push(Message::assistant(vec![ContentBlock::tool_use(
        long,
        "read",
        json!({}),
    )]));
    conversation.push(Message::user(vec![ContentBlock::tool_result(
        long,
        vec![ToolResultPart::Text { text: "C".into() }],
        false,
    )]));
    for kind in [ProviderKind::OpenAi, ProviderKind::OpenAiResponses] {
        let server = enforcing(Rule::OpenAi, kind).await;
        let answer = send(config(kind, format!("{}/v1", server.url())), &conversation).await;
        assert_eq!(answer.as_deref(), Ok("ok"), "{kind:?}");
        // The server did check: the same ids sent as the conversation holds them are refused.
        let body = serde_json::to_value(
            conversation
                .messages()
                .iter()
                .flat_map(|m| {
                    m.tool_uses()
                        .map(|(id, _, _)| json!({"tool_calls": [{"id": id}]}))
                })
                .collect::<Vec<_>>(),
        )
        .expect("json");
        assert!(verdict(Rule::OpenAi, &json!({"messages": body})).is_some());
    }
    // The conversation keeps what the models minted.
    let kept: Vec<&str> = conversation
        .messages()
        .iter()
        .flat_map(|m| m.tool_uses().map(|(id, _, _)| id))
        .collect();
    assert_eq!(kept, ["call_0", "call_0", long]);
}

#[tokio::test]
async fn ids_are_nine_letters_and_digits_for_mistral_recognised_learned_or_set() {
    let conversation = numbered_per_message();
    let server = enforcing(Rule::Mistral, ProviderKind::OpenAi).await;
    // Set for a server the base URL does not name (a self-hosted Mistral model).
    let set = config(ProviderKind::OpenAi, format!("{}/v1", server.url()))
        .with_tool_ids(ToolIdForm::NineAlphanumeric);
    assert_eq!(send(set, &conversation).await.as_deref(), Ok("ok"));
    let requests = || server.requests.lock().expect("lock").len();
    assert_eq!(requests(), 1);
    // Without it, that server refuses OpenAI's form with Mistral's own 400, which names the
    // rule: the provider learns it and sends the same request once more, fitted, at once.
    let unset = config(ProviderKind::OpenAi, format!("{}/v1", server.url()));
    let learning = HttpProvider::new(unset).expect("a provider");
    assert_eq!(
        send_with(&learning, &conversation).await.as_deref(),
        Ok("ok")
    );
    assert_eq!(requests(), 3);
    // Learned for good: the next request fits the first time.
    assert_eq!(
        send_with(&learning, &conversation).await.as_deref(),
        Ok("ok")
    );
    assert_eq!(requests(), 4);
    // A form set by the embedder is kept: the refusal is the answer.
    let pinned = config(ProviderKind::OpenAi, format!("{}/v1", server.url()))
        .with_tool_ids(ToolIdForm::Standard);
    let refused = send(pinned, &conversation).await.expect_err("refused");
    assert!(refused.contains("400"), "{refused}");
    assert_eq!(requests(), 5);
    // Recognised from Mistral's endpoint.
    for url in [
        "https://api.mistral.ai/v1",
        "https://API.Mistral.AI:443/v1/",
        "http://codestral.mistral.ai/v1",
    ] {
        assert_eq!(
            ToolIdForm::for_base_url(url),
            ToolIdForm::NineAlphanumeric,
            "{url}"
        );
    }
    for url in [
        "https://api.openai.com/v1",
        "https://notmistral.ai/v1",
        "https://mistral.ai.evil.com/v1",
        "http://127.0.0.1:8000/v1",
    ] {
        assert_eq!(ToolIdForm::for_base_url(url), ToolIdForm::Standard, "{url}");
    }
}
