//! Bedrock's request signing (`provider::aws`, feature `bedrock`): signatures equal to those
//! botocore (the AWS SDK for Python) computes for the same Converse requests, the session
//! token, the Bedrock API key, the environment's variables, and no credential in any text.
//!
//! The pinned values come from botocore 1.44.8's `SigV4Auth`, run with its clock fixed:
//!
//! ```python
//! from unittest import mock
//! from botocore.auth import SigV4Auth
//! from botocore.awsrequest import AWSRequest
//! from botocore.credentials import Credentials
//! request = AWSRequest(method="POST", url=URL, data=BODY, headers={
//!     "content-type": "application/json", "accept": "application/vnd.amazon.eventstream"})
//! with mock.patch("botocore.auth.get_current_datetime",
//!                 return_value=datetime.datetime(2026, 1, 15, 10, 30, 0)):
//!     SigV4Auth(Credentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY, token), "bedrock", REGION).add_auth(request)
//! print(request.headers["Authorization"])
//! ```
//!
//! (The AWS test suite's own vectors, for its service `service`, are `provider::aws`'s unit
//! tests.)

use rebound_core::secrets::REDACTED;
use rebound_effects::provider::aws::{
    aws_region_from_lookup, sign, AuthHeaders, AwsConfigError, AwsCredentials, BedrockAuth,
    RequestToSign, SignError,
};
use rebound_effects::provider::ApiKey;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// AWS's documentation's example access key id and secret access key.
const ACCESS_KEY_ID: &str = "AKIDEXAMPLE";
const SECRET_ACCESS_KEY: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
/// AWS's documentation's example session token (the test suite's `post-sts-header-*`).
const SESSION_TOKEN: &str = "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==";
/// A Bedrock API key's shape (`ABSK` + base64).
const BEARER_TOKEN: &str = "ABSKQmVkcm9ja0FQSUtleS1leGFtcGxlLXRva2Vu";

/// A Converse request's body.
const BODY: &[u8] = br#"{"messages":[{"role":"user","content":[{"text":"Hello"}]}],"inferenceConfig":{"maxTokens":1024}}"#;
/// The headers a Converse stream request sends and signs.
const HEADERS: &[(&str, &str)] = &[
    ("content-type", "application/json"),
    ("accept", "application/vnd.amazon.eventstream"),
];
/// A Claude model's id, escaped as botocore sends it (`:` as `%3A`).
const MODEL_ESCAPED: &str = "anthropic.claude-3-5-sonnet-20240620-v1%3A0";

/// 2026-01-15T10:30:00Z.
fn time() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_768_473_000)
}

fn credentials(token: Option<&str>) -> AwsCredentials {
    AwsCredentials::new(ACCESS_KEY_ID, SECRET_ACCESS_KEY, token.map(str::to_owned))
}

/// The Converse stream URL of `model` (as sent) in `region`.
fn converse_stream(region: &str, model: &str) -> String {
    format!(
        "{}/model/{model}/converse-stream",
        rebound_effects::provider::bedrock_base_url(region)
    )
}

fn request<'a>(url: &'a str, body: &'a [u8]) -> RequestToSign<'a> {
    RequestToSign {
        method: "POST",
        url,
        headers: HEADERS,
        body,
    }
}

/// The headers as a map, and their names in order.
fn parts(headers: &AuthHeaders) -> (BTreeMap<&'static str, String>, Vec<&'static str>) {
    let map = headers.iter().map(|(n, v)| (n, v.to_owned())).collect();
    let names = headers.iter().map(|(n, _)| n).collect();
    (map, names)
}

fn authorization(headers: &AuthHeaders) -> &str {
    headers
        .get("authorization")
        .expect("an authorization header")
}

#[test]
fn converse_stream_request_is_signed_as_botocore_signs_it() {
    let url = converse_stream("us-east-1", MODEL_ESCAPED);
    let headers = sign(
        &request(&url, BODY),
        &credentials(None),
        "us-east-1",
        time(),
    )
    .unwrap();
    let (map, names) = parts(&headers);
    // No x-amz-content-sha256 and no token: botocore adds neither for Bedrock.
    assert_eq!(names, ["x-amz-date", "authorization"]);
    assert_eq!(map["x-amz-date"], "20260115T103000Z");
    assert_eq!(
        map["authorization"],
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260115/us-east-1/bedrock/aws4_request, \
         SignedHeaders=accept;content-type;host;x-amz-date, \
         Signature=3e1b0503cd80c6f7fa331afa9fc48fdee41b9032d04a24938c45682afa2a9eed"
    );
}

#[test]
fn an_unescaped_model_id_is_signed_as_sent_as_botocore_signs_it() {
    // The path as reqwest sends a model id put into a URL unescaped: `:` as it is. A
    // different path from the escaped one, so a different signature, both botocore's.
    let url = converse_stream("us-east-1", "anthropic.claude-3-5-sonnet-20240620-v1:0");
    let headers = sign(
        &request(&url, BODY),
        &credentials(None),
        "us-east-1",
        time(),
    )
    .unwrap();
    assert_eq!(
        authorization(&headers),
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260115/us-east-1/bedrock/aws4_request, \
         SignedHeaders=accept;content-type;host;x-amz-date, \
         Signature=7a5aed0babc25ed607f751efe805801f982f0f2186f4e96fcf922f4372b6d4c1"
    );
}

#[test]
fn an_inference_profile_arn_path_is_signed_double_encoded_as_botocore_signs_it() {
    // An ARN as the model: its `:` and `/` escaped in the URL, escaped again in the signed
    // path (every AWS service but S3 signs the path encoded twice).
    let arn = "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2F\
               us.anthropic.claude-sonnet-4-20250514-v1%3A0";
    let url = converse_stream("us-east-1", arn);
    let headers = sign(
        &request(&url, BODY),
        &credentials(None),
        "us-east-1",
        time(),
    )
    .unwrap();
    assert_eq!(
        authorization(&headers),
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260115/us-east-1/bedrock/aws4_request, \
         SignedHeaders=accept;content-type;host;x-amz-date, \
         Signature=1530ae8f6c4dd16784b1447867be9ea0502c1fca743c8870bce4b8d91f9db058"
    );
}

#[test]
fn temporary_credentials_send_their_session_token_and_sign_it_as_botocore_does() {
    let url = converse_stream("eu-central-1", MODEL_ESCAPED);
    let credentials = credentials(Some(SESSION_TOKEN));
    assert!(credentials.has_session_token());
    let headers = sign(&request(&url, BODY), &credentials, "eu-central-1", time()).unwrap();
    let (map, names) = parts(&headers);
    assert_eq!(
        names,
        ["x-amz-date", "authorization", "x-amz-security-token"]
    );
    assert_eq!(map["x-amz-security-token"], SESSION_TOKEN);
    assert_eq!(
        map["authorization"],
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260115/eu-central-1/bedrock/aws4_request, \
         SignedHeaders=accept;content-type;host;x-amz-date;x-amz-security-token, \
         Signature=2c4bb0afc1b89921ab04ab9a246cec6b9ebecb0d20f612abd5bf11afe665e898"
    );
}

#[test]
fn an_empty_session_token_is_none() {
    let url = converse_stream("us-east-1", MODEL_ESCAPED);
    let credentials = credentials(Some(" \n"));
    assert!(!credentials.has_session_token());
    let headers = sign(&request(&url, BODY), &credentials, "us-east-1", time()).unwrap();
    assert_eq!(headers.get("x-amz-security-token"), None);
}

#[test]
fn another_body_time_region_or_header_changes_the_signature() {
    let signature = |url: &str, body: &[u8], region: &str, time: SystemTime, accept: &str| {
        let headers = [("content-type", "application/json"), ("accept", accept)];
        let request = RequestToSign {
            method: "POST",
            url,
            headers: &headers,
            body,
        };
        let headers = sign(&request, &credentials(None), region, time).unwrap();
        let authorization = authorization(&headers);
        let at = authorization.find("Signature=").expect("a signature");
        authorization[at..].to_owned()
    };
    let east = converse_stream("us-east-1", MODEL_ESCAPED);
    let west = converse_stream("us-west-2", MODEL_ESCAPED);
    let stream = "application/vnd.amazon.eventstream";
    let base = signature(&east, BODY, "us-east-1", time(), stream);
    // Signing is a function of its inputs: the same request signs the same.
    assert_eq!(base, signature(&east, BODY, "us-east-1", time(), stream));
    let others = [
        signature(&east, b"{}", "us-east-1", time(), stream),
        signature(
            &east,
            BODY,
            "us-east-1",
            time() + Duration::from_secs(1),
            stream,
        ),
        signature(&west, BODY, "us-west-2", time(), stream),
        signature(&east, BODY, "us-east-1", time(), "application/json"),
        signature(
            &east.replace("v1%3A0", "v2%3A0"),
            BODY,
            "us-east-1",
            time(),
            stream,
        ),
    ];
    for (i, other) in others.iter().enumerate() {
        assert_ne!(&base, other, "change {i} left the signature as it was");
    }
}

#[test]
fn a_bedrock_api_key_is_sent_as_a_bearer_token_unsigned() {
    let auth = BedrockAuth::BearerToken(ApiKey::new(BEARER_TOKEN));
    let url = converse_stream("us-east-1", MODEL_ESCAPED);
    let headers = auth.headers(&request(&url, BODY), time()).unwrap();
    let (map, names) = parts(&headers);
    assert_eq!(names, ["authorization"]);
    assert_eq!(map["authorization"], format!("Bearer {BEARER_TOKEN}"));
}

#[test]
fn bedrock_auth_with_credentials_signs_for_its_region() {
    let auth = BedrockAuth::SigV4 {
        credentials: credentials(Some(SESSION_TOKEN)),
        region: "eu-central-1".to_owned(),
    };
    let url = converse_stream("eu-central-1", MODEL_ESCAPED);
    let by_auth = auth.headers(&request(&url, BODY), time()).unwrap();
    let by_sign = sign(
        &request(&url, BODY),
        &credentials(Some(SESSION_TOKEN)),
        "eu-central-1",
        time(),
    )
    .unwrap();
    assert_eq!(by_auth, by_sign);
}

/// A lookup over `vars`, as the environment would answer.
fn vars<'a>(vars: &'a [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

#[test]
fn the_bedrock_api_key_is_chosen_when_its_variable_is_set() {
    let auth = BedrockAuth::from_lookup(vars(&[
        ("AWS_BEARER_TOKEN_BEDROCK", BEARER_TOKEN),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY),
    ]))
    .unwrap();
    let BedrockAuth::BearerToken(key) = auth else {
        panic!("expected the API key, got {auth:?}");
    };
    assert_eq!(key.expose(), BEARER_TOKEN);
}

#[test]
fn the_standard_variables_are_signed_with_when_there_is_no_api_key() {
    let auth = BedrockAuth::from_lookup(vars(&[
        ("AWS_BEARER_TOKEN_BEDROCK", ""),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID),
        (
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\n",
        ),
        ("AWS_SESSION_TOKEN", SESSION_TOKEN),
        ("AWS_DEFAULT_REGION", "eu-central-1"),
    ]))
    .unwrap();
    let BedrockAuth::SigV4 {
        credentials,
        region,
    } = &auth
    else {
        panic!("expected AWS credentials, got {auth:?}");
    };
    assert_eq!(region, "eu-central-1");
    // The variables' credentials sign as botocore's vector does (the secret's newline
    // trimmed).
    let url = converse_stream("eu-central-1", MODEL_ESCAPED);
    let headers = sign(&request(&url, BODY), credentials, region, time()).unwrap();
    assert!(authorization(&headers)
        .ends_with("Signature=2c4bb0afc1b89921ab04ab9a246cec6b9ebecb0d20f612abd5bf11afe665e898"));
}

#[test]
fn a_missing_credential_variable_is_named() {
    let no_secret = AwsCredentials::from_lookup(vars(&[("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)]));
    assert_eq!(
        no_secret.unwrap_err(),
        AwsConfigError::MissingVariable {
            var: "AWS_SECRET_ACCESS_KEY"
        }
    );
    let nothing = BedrockAuth::from_lookup(vars(&[("AWS_REGION", "us-east-1")])).unwrap_err();
    assert_eq!(
        nothing,
        AwsConfigError::MissingVariable {
            var: "AWS_ACCESS_KEY_ID"
        }
    );
    let message = nothing.to_string();
    assert!(message.contains("AWS_ACCESS_KEY_ID"), "{message}");
    assert!(message.contains("AWS_BEARER_TOKEN_BEDROCK"), "{message}");
    let empty_id = AwsCredentials::from_lookup(vars(&[
        ("AWS_ACCESS_KEY_ID", "  "),
        ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY),
    ]));
    assert_eq!(
        empty_id.unwrap_err(),
        AwsConfigError::MissingVariable {
            var: "AWS_ACCESS_KEY_ID"
        }
    );
}

#[test]
fn the_region_is_aws_region_else_aws_default_region() {
    let both = vars(&[
        ("AWS_REGION", "ap-southeast-2"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ]);
    assert_eq!(
        aws_region_from_lookup(both).as_deref(),
        Ok("ap-southeast-2")
    );
    let default_only = vars(&[
        ("AWS_REGION", ""),
        ("AWS_DEFAULT_REGION", "us-gov-west-1\n"),
    ]);
    assert_eq!(
        aws_region_from_lookup(default_only).as_deref(),
        Ok("us-gov-west-1")
    );
    assert_eq!(
        aws_region_from_lookup(vars(&[])),
        Err(AwsConfigError::MissingRegion)
    );
    // A region goes into the endpoint's host name: nothing but a region's name passes.
    for bad in ["evil.example/x", "US-EAST-1", "-us", "us east"] {
        let error = aws_region_from_lookup(vars(&[("AWS_REGION", bad)])).unwrap_err();
        assert!(
            matches!(error, AwsConfigError::InvalidRegion { .. }),
            "{bad}: {error:?}"
        );
    }
    let url = converse_stream("us-east-1", MODEL_ESCAPED);
    assert_eq!(
        sign(
            &request(&url, BODY),
            &credentials(None),
            "us-east-1.evil",
            time()
        ),
        Err(SignError::InvalidRegion {
            region: "us-east-1.evil".to_owned()
        })
    );
}

#[test]
fn bedrock_endpoint_is_the_regions_runtime_host() {
    assert_eq!(
        rebound_effects::provider::bedrock_base_url("eu-central-1"),
        "https://bedrock-runtime.eu-central-1.amazonaws.com"
    );
}

#[test]
fn requests_that_cannot_be_signed_are_refused_with_typed_errors() {
    let url = converse_stream("us-east-1", MODEL_ESCAPED);
    let signed = |request: &RequestToSign<'_>| {
        sign(
            request,
            &credentials(Some(SESSION_TOKEN)),
            "us-east-1",
            time(),
        )
    };
    for bad_url in [
        "not a url",
        "/model/m/converse-stream",
        "file:///etc/passwd",
    ] {
        let error = signed(&request(bad_url, BODY)).unwrap_err();
        assert!(
            matches!(error, SignError::InvalidUrl { .. }),
            "{bad_url}: {error:?}"
        );
    }
    let with_header = |name: &'static str, value: &'static str| {
        let headers = [(name, value)];
        signed(&RequestToSign {
            method: "POST",
            url: &url,
            headers: &headers,
            body: BODY,
        })
    };
    for (name, value) in [
        ("x-amz-date", "20260115T103000Z"),
        ("Authorization", "Bearer x"),
        ("x-amz-content-sha256", "UNSIGNED-PAYLOAD"),
        ("x-gateway-key", "gw-secret-value\r\ninjected: 1"),
        ("bad name", "v"),
    ] {
        let error = with_header(name, value).unwrap_err();
        assert!(
            matches!(&error, SignError::InvalidHeader { name: n } if n == name),
            "{name}: {error:?}"
        );
    }
    let before_1970 = sign(
        &request(&url, BODY),
        &credentials(None),
        "us-east-1",
        UNIX_EPOCH - Duration::from_secs(1),
    );
    assert_eq!(before_1970, Err(SignError::InvalidTime));
}

/// Every text a credential could leak into.
fn assert_no_credential(text: &str) {
    for secret in [
        ACCESS_KEY_ID,
        SECRET_ACCESS_KEY,
        SESSION_TOKEN,
        BEARER_TOKEN,
        "gw-secret-value",
    ] {
        assert!(!text.contains(secret), "a credential in: {text}");
    }
}

#[test]
fn credentials_never_appear_in_debug_or_error_text() {
    let credentials = credentials(Some(SESSION_TOKEN));
    let sigv4 = BedrockAuth::SigV4 {
        credentials: credentials.clone(),
        region: "us-east-1".to_owned(),
    };
    let bearer = BedrockAuth::BearerToken(ApiKey::new(BEARER_TOKEN));
    let url = converse_stream("us-east-1", MODEL_ESCAPED);
    let signed = sign(&request(&url, BODY), &credentials, "us-east-1", time()).unwrap();
    let bearer_headers = bearer.headers(&request(&url, BODY), time()).unwrap();
    let mut texts = vec![
        format!("{credentials:?}"),
        format!("{sigv4:?}"),
        format!("{bearer:?}"),
        format!("{signed:?}"),
        format!("{bearer_headers:?}"),
        format!("{:?}", request(&url, BODY)),
    ];
    let gateway = [("x-gateway-key", "gw-secret-value")];
    let with_gateway_key = RequestToSign {
        method: "POST",
        url: &url,
        headers: &gateway,
        body: BODY,
    };
    texts.push(format!("{with_gateway_key:?}"));
    assert!(texts.last().unwrap().contains("x-gateway-key"));
    assert_eq!(
        texts[0],
        "AwsCredentials { access_key_id: ***, secret_access_key: ***, session_token: Some(***) }"
    );
    assert_eq!(
        texts[3],
        "AuthHeaders[\"x-amz-date\", \"authorization\", \"x-amz-security-token\"]"
    );
    // Errors met with credentials at hand: one of a pair missing, a header refused.
    let half = AwsCredentials::from_lookup(vars(&[("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)]));
    let half = half.unwrap_err();
    let headers = [("x-gateway-key", "gw-secret-value\ninjected")];
    let refused = sign(
        &RequestToSign {
            method: "POST",
            url: &url,
            headers: &headers,
            body: BODY,
        },
        &credentials,
        "us-east-1",
        time(),
    )
    .unwrap_err();
    let with_password = "https://AKIDEXAMPLE:wJalrXUtnFEMI%2FK7MDENG@[bad/model";
    let bad_url = sign(
        &request(with_password, BODY),
        &credentials,
        "us-east-1",
        time(),
    );
    let bad_url = bad_url.unwrap_err();
    for error in [&half as &dyn std::error::Error, &refused, &bad_url] {
        texts.push(error.to_string());
        texts.push(format!("{error:?}"));
    }
    for text in &texts {
        assert_no_credential(text);
    }
}

#[test]
fn the_secrets_to_mask_are_the_credentials() {
    let masked = credentials(Some(SESSION_TOKEN))
        .secrets()
        .redact(&format!(
            "id {ACCESS_KEY_ID} secret {SECRET_ACCESS_KEY} token {SESSION_TOKEN}"
        ))
        .into_owned();
    assert_eq!(
        masked,
        format!("id {REDACTED} secret {REDACTED} token {REDACTED}")
    );
    let bearer = BedrockAuth::BearerToken(ApiKey::new(BEARER_TOKEN)).secrets();
    assert_eq!(
        bearer.redact(&format!("bad key {BEARER_TOKEN}")),
        format!("bad key {REDACTED}")
    );
}

/// Every field of every span and event, as text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<String>>);

struct Text<'a>(&'a mut String);

impl Visit for Text<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?}\n", field.name()));
    }
}

impl<S: Subscriber> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        attrs.record(&mut Text(&mut self.0.lock().unwrap()));
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        event.record(&mut Text(&mut self.0.lock().unwrap()));
    }
}

#[test]
fn the_signers_trace_events_never_reach_the_subscriber() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let url = converse_stream("us-east-1", MODEL_ESCAPED);
    let credentials = credentials(Some(SESSION_TOKEN));
    tracing::subscriber::with_default(subscriber, || {
        sign(&request(&url, BODY), &credentials, "us-east-1", time()).unwrap();
    });
    assert_no_credential(&capture.0.lock().unwrap());

    // Why: aws-sigv4 itself, signing the same request, writes the session token out at the
    // trace level (its canonical request). Should a release stop doing so, this fails and
    // the shield in `sign` can go.
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let identity = aws_credential_types::Credentials::new(
        ACCESS_KEY_ID,
        SECRET_ACCESS_KEY,
        Some(SESSION_TOKEN.to_owned()),
        None,
        "test",
    )
    .into();
    let params = ::aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("bedrock")
        .time(time())
        .settings(::aws_sigv4::http_request::SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let signable = ::aws_sigv4::http_request::SignableRequest::new(
        "POST",
        url.as_str(),
        HEADERS.iter().copied(),
        ::aws_sigv4::http_request::SignableBody::Bytes(BODY),
    )
    .unwrap();
    tracing::subscriber::with_default(subscriber, || {
        ::aws_sigv4::http_request::sign(signable, &params).unwrap();
    });
    assert!(
        capture.0.lock().unwrap().contains(SESSION_TOKEN),
        "aws-sigv4 no longer traces the session token"
    );
}
