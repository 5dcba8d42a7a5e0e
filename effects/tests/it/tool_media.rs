//! Images in tool results go through the media check on their way out of a ToolSet.

use rebound_core::{BatchOutcome, MediaSource, ToolCall, ToolOutput, ToolResultPart, ToolSpec};
use rebound_effects::tools::{FnTool, ToolSet};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

fn image(media_type: &str, data: String) -> ToolResultPart {
    ToolResultPart::Image {
        source: MediaSource::Base64 {
            media_type: media_type.into(),
            data,
        },
    }
}

#[tokio::test]
async fn images_a_provider_cannot_take_are_dropped_with_a_note_and_good_ones_kept() {
    // 6 MiB of PNG-looking bytes: the PNG signature, then zeros, in base64.
    let mut big = String::from("iVBORw0KGgo");
    big.push('A');
    big.push_str(&"A".repeat(6 * 1024 * 1024 / 3 * 4));
    let tool = FnTool::new(
        ToolSpec {
            name: "camera".into(),
            description: "Takes pictures.".into(),
            input_schema: json!({"type": "object"}),
        },
        move |_, _| {
            let big = big.clone();
            async move {
                Ok(ToolOutput {
                    parts: vec![
                        ToolResultPart::text("three pictures:"),
                        image("image/png", PIXEL.into()),
                        image("image/png", big),
                        image("image/tiff", "SUkqAA==".into()),
                    ],
                })
            }
        },
    );
    let tools = ToolSet::builder().tool(tool).build().unwrap();
    let calls = vec![ToolCall {
        id: "t1".into(),
        name: "camera".into(),
        input: json!({}).into(),
    }];
    let BatchOutcome::PerCall(outcomes) = tools.run_batch(calls, &CancellationToken::new()).await
    else {
        panic!("not canceled")
    };
    let output = outcomes[0].result.clone().expect("the call itself worked");
    assert_eq!(
        output.parts,
        [
            ToolResultPart::text("three pictures:"),
            image("image/png", PIXEL.into()),
            ToolResultPart::text(
                "[image dropped: it is 6 MB (declared as `image/png`), over the 5 MB limit for one image]"
            ),
            ToolResultPart::text(
                "[image dropped: its bytes are not a PNG, JPEG, GIF or WebP image (declared as \
                 `image/tiff`); the model can only be shown those]"
            ),
        ]
    );
}
