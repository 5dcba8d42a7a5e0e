//! Registering the endpoint with a Restate server (its admin API), as
//! `restate deployments register` does.

use std::time::Duration;

/// Why the endpoint could not be registered. Names the admin address tried; never hangs:
/// each attempt is bounded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// Nothing answered at the admin address (no Restate server there, or not yet).
    #[error("no Restate admin API answered at {address}: {reason}")]
    Unreachable {
        /// The admin URL tried.
        address: String,
        /// What the connection said.
        reason: String,
    },
    /// Restate answered, and refused the registration (it could not reach the endpoint, or
    /// the services conflict with ones already registered).
    #[error("Restate at {address} refused to register {endpoint} ({status}): {message}")]
    Refused {
        /// The admin URL tried.
        address: String,
        /// The endpoint's URL.
        endpoint: String,
        /// The HTTP status.
        status: u16,
        /// Restate's message (bounded).
        message: String,
    },
}

/// Registers the endpoint at `endpoint_url` (e.g. `http://127.0.0.1:9080`) with the Restate
/// server whose admin API is at `admin_url` (e.g. `http://127.0.0.1:9070`). Re-registering
/// the same endpoint (after a restart, with changed handlers) replaces it (`force`).
///
/// Restate calls the endpoint back during the registration: it must already be serving.
///
/// ```no_run
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let agent = rebound_durable::DurableAgent::new(rebound_core::MachineConfig::default(), vec![]);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:9080").await?;
/// tokio::spawn(rebound_durable::serve(agent, listener));
/// rebound_durable::register("http://127.0.0.1:9070", "http://127.0.0.1:9080").await?;
/// # Ok(()) }
/// ```
pub async fn register(admin_url: &str, endpoint_url: &str) -> Result<(), RegisterError> {
    let address = admin_url.trim_end_matches('/').to_owned();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| RegisterError::Unreachable {
            address: address.clone(),
            reason: e.to_string(),
        })?;
    let body = serde_json::json!({ "uri": endpoint_url, "force": true }).to_string();
    let response = client
        .post(format!("{address}/deployments"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| RegisterError::Unreachable {
            address: address.clone(),
            reason: without_url(&e),
        })?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let text = response.text().await.unwrap_or_default();
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
        .unwrap_or(text);
    Err(RegisterError::Refused {
        address,
        endpoint: endpoint_url.to_owned(),
        status: status.as_u16(),
        message: rebound_core::tool::bounded(message.trim(), 500),
    })
}

/// reqwest's error without the URL it repeats (the address is already in the message).
fn without_url(e: &reqwest::Error) -> String {
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(e);
    let mut reason = if e.is_timeout() {
        "timed out".to_owned()
    } else if e.is_connect() {
        "connection failed".to_owned()
    } else {
        "request failed".to_owned()
    };
    while let Some(s) = source {
        reason = format!("{reason}: {s}");
        source = s.source();
    }
    reason
}
