//! A model id as one segment of a request path (Gemini's `/models/{id}:…`, Bedrock's
//! `/model/{id}/converse`): every byte outside RFC 3986's unreserved characters
//! (`[A-Za-z0-9._~-]`) percent-encoded, as the AWS SDKs encode a URI label, so an id (an
//! inference profile's ARN, `…-v1:0`) can never change the path; and, for servers, decoded
//! back.

/// Appends `label` to `out`, percent-encoded.
pub(crate) fn push_encoded(out: &mut String, label: &str) {
    for byte in label.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
}

/// `label` with its percent escapes decoded; `None` for an escape that is not two hex
/// digits, or bytes that are not UTF-8.
#[cfg(feature = "server")]
pub(crate) fn decode(label: &str) -> Option<String> {
    let bytes = label.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
