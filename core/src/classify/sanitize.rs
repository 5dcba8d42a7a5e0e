//! Turning provider text and raw bodies into short, one-line, secret-free strings.

/// How many bytes of a raw body are ever looked at (for excerpts and marker scans).
pub(crate) const SCAN_LIMIT_BYTES: usize = 64 * 1024;
/// Longest provider message kept, in characters.
pub(crate) const MAX_MESSAGE_CHARS: usize = 2000;
/// Longest excerpt of a body that was not a recognizable error object, in characters.
pub(crate) const MAX_EXCERPT_CHARS: usize = 300;
/// Longest request id kept, in characters.
pub(crate) const MAX_REQUEST_ID_CHARS: usize = 200;

/// One line of at most `max_chars` characters: control characters and runs of whitespace
/// become one space, the ends are trimmed, API keys (`sk-…`) are redacted, and an ellipsis
/// marks a cut.
pub(crate) fn one_line(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars * 4));
    let mut pending_space = false;
    let mut count = 0usize;
    let mut cut = false;
    for c in text.chars() {
        if c.is_control() || c.is_whitespace() {
            pending_space = !out.is_empty();
            continue;
        }
        if pending_space {
            if count + 1 >= max_chars {
                cut = true;
                break;
            }
            out.push(' ');
            count += 1;
            pending_space = false;
        }
        if count >= max_chars {
            cut = true;
            break;
        }
        out.push(c);
        count += 1;
    }
    let mut out = redact_api_keys(&out);
    if cut {
        out.push('…');
    }
    out
}

/// A short excerpt of a raw body that was not a recognizable error object: invalid UTF-8 is
/// replaced, HTML tags are dropped, and the result is one bounded line. An empty body gives
/// `(empty body)`.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let head = &body[..body.len().min(SCAN_LIMIT_BYTES)];
    let text = String::from_utf8_lossy(head);
    let trimmed = text.trim_start_matches('\u{feff}').trim();
    let line = if trimmed.starts_with('<') {
        one_line(&strip_tags(trimmed), MAX_EXCERPT_CHARS)
    } else {
        one_line(trimmed, MAX_EXCERPT_CHARS)
    };
    if line.is_empty() {
        "(empty body)".to_owned()
    } else {
        line
    }
}

/// The raw body as lowercase text, bounded, for marker scans.
pub(crate) fn scan_text(body: &[u8]) -> String {
    let head = &body[..body.len().min(SCAN_LIMIT_BYTES)];
    String::from_utf8_lossy(head).to_lowercase()
}

/// Drops everything between `<` and `>`, leaving a space so words do not run together.
fn strip_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

/// Replaces anything that looks like an API key (`sk-` at a word start or after `_`, as in
/// `req_sk-…`, as OpenAI and Anthropic keys begin) with `sk-***`. OpenAI already masks keys it echoes, but a proxy may
/// not, and our messages must never carry a secret.
fn redact_api_keys(text: &str) -> String {
    if !text.contains("sk-") {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("sk-") {
        let at_word_start = rest[..pos]
            .chars()
            .next_back()
            .map_or(true, |c| !c.is_alphanumeric() && c != '-');
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 3..];
        let key_len = after
            .char_indices()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '*')))
            .map_or(after.len(), |(i, _)| i);
        if at_word_start && key_len >= 4 {
            out.push_str("sk-***");
            rest = &after[key_len..];
        } else {
            out.push_str("sk-");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_collapses_whitespace_and_drops_control_characters() {
        assert_eq!(one_line("  a\n\tb\r\n\u{0}c\u{7f}  ", 100), "a b c");
        assert_eq!(one_line("\u{1b}[31mred\u{1b}[0m", 100), "[31mred [0m");
    }

    #[test]
    fn one_line_is_bounded_and_marks_the_cut() {
        let long = "x".repeat(10_000);
        let line = one_line(&long, 300);
        assert_eq!(line.chars().count(), 301);
        assert!(line.ends_with('…'));
        assert_eq!(one_line("abc", 3), "abc");
        assert_eq!(one_line("ab cd", 3), "ab…");
    }

    #[test]
    fn api_keys_are_redacted_but_words_containing_sk_are_not() {
        assert_eq!(
            one_line(
                "Incorrect API key provided: sk-VKMIs*****wjh3. You can find your API key",
                200
            ),
            "Incorrect API key provided: sk-***. You can find your API key"
        );
        assert_eq!(
            one_line("key sk-ant-api03-abcdefgh rejected", 200),
            "key sk-*** rejected"
        );
        assert_eq!(
            one_line("task-sk-1 and disk-sk-foo", 200),
            "task-sk-1 and disk-sk-foo"
        );
        assert_eq!(one_line("sk-", 200), "sk-");
        // A key glued to an identifier by `_`, as a proxy's request id may hold it.
        assert_eq!(
            one_line("request-id: req_sk-ant-api03-abcdefgh", 200),
            "request-id: req_sk-***"
        );
    }

    #[test]
    fn excerpts_of_html_keep_only_the_text() {
        let html = b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body></body></html>";
        assert_eq!(excerpt(html), "502 Bad Gateway");
        assert_eq!(excerpt(b""), "(empty body)");
        assert_eq!(excerpt(b" \r\n "), "(empty body)");
        assert_eq!(excerpt(b"\xff\xfeok"), "\u{fffd}\u{fffd}ok");
    }
}
