//! The package's typed errors, as the native side throws them: a JavaScript `Error` with a
//! `kind` property (one of [`Kind`]'s names), which `lib/errors.js` turns into an instance of
//! the class of that name. Bad input throws one of these, never a panic.

use js_sys::{Error, Reflect};
use std::fmt::Display;
use wasm_bindgen::JsValue;

/// What kind of input was refused: the error classes of `lib/errors.js`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A machine configuration, scenario, policy or option that cannot be read.
    Config,
    /// An event the machine cannot take: malformed, or refused. The machine is unchanged.
    Event,
    /// An answer carrying an id that no command of this machine ever carried.
    UnknownAnswer,
    /// An event that makes no sense now (a second user message during a run).
    UnexpectedEvent,
    /// Bytes that are no valid stream or response of the provider (carries `failure`).
    Stream,
    /// A trace that cannot be read.
    Trace,
    /// A request body that cannot be built.
    Request,
    /// A permit ask, budget note or ticket a retry budget cannot take.
    Budget,
    /// Anything else the package refuses (a snapshot without its messages, say).
    Rebound,
}

impl Kind {
    /// The `kind` property's value, which `lib/errors.js` maps to a class.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Config => "config",
            Kind::Event => "event",
            Kind::UnknownAnswer => "unknown_answer",
            Kind::UnexpectedEvent => "unexpected_event",
            Kind::Stream => "stream",
            Kind::Trace => "trace",
            Kind::Request => "request",
            Kind::Budget => "budget",
            Kind::Rebound => "rebound",
        }
    }
}

/// A JavaScript `Error` of `kind` saying `message`.
pub fn error(kind: Kind, message: impl Display) -> JsValue {
    let error = Error::new(&message.to_string());
    // Setting a property of a fresh Error cannot fail; were it to, the Error still says what
    // went wrong and lib/errors.js makes it a ReboundError.
    let _ = Reflect::set(
        &error,
        &JsValue::from_str("kind"),
        &JsValue::from_str(kind.name()),
    );
    error.into()
}

/// A stream error: `message`, with `failure` (the classified ProviderFailure's JSON text) to
/// answer the request with `ProviderFailed`.
pub fn stream_error(message: impl Display, failure_json: &str) -> JsValue {
    let error = error(Kind::Stream, message);
    let _ = Reflect::set(
        &error,
        &JsValue::from_str("failure"),
        &JsValue::from_str(failure_json),
    );
    error
}

/// The result of a native call: the value, or a typed error.
pub type Result<T> = std::result::Result<T, JsValue>;
