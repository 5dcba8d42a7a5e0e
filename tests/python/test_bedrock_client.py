"""The fake provider server's Bedrock Converse API, checked by the official AWS SDK for Python
(boto3's `bedrock-runtime` client, requests signed with SigV4 by botocore): `converse` and
`converse_stream` parse into the expected text and tool call, a conversation that sends a
tool result back is taken, each HTTP fault raises botocore's ClientError with Bedrock's error
code, an in-stream exception raises from the event stream, and botocore's standard retry mode
retries a throttle.
"""

import os
import sys
import unittest

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError

sys.path.insert(0, os.path.dirname(__file__))
from test_fake_server import ANSWER_CALL, ANSWER_TEXT, KEY, FakeServer, scenario  # noqa: E402

MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
HI = [{"role": "user", "content": [{"text": "hi"}]}]


def client(server, key=KEY, retries=1):
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=server.url,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key="fake-secret-access-key",
        config=Config(retries={"total_max_attempts": retries, "mode": "standard"}),
    )


class BedrockClient(unittest.TestCase):
    def serve(self, scenario_json):
        server = FakeServer(scenario_json)
        self.addCleanup(server.stop)
        return server

    def test_converse_reads_text_and_a_tool_call(self):
        server = self.serve(scenario())
        r = client(server).converse(modelId=MODEL, messages=HI)
        content = r["output"]["message"]["content"]
        self.assertEqual(content[0]["text"], ANSWER_TEXT)
        self.assertEqual(content[1]["toolUse"]["name"], ANSWER_CALL["name"])
        self.assertEqual(content[1]["toolUse"]["input"], ANSWER_CALL["input"])
        self.assertEqual(r["stopReason"], "tool_use")
        [request] = server.requests(1)
        self.assertEqual(request["path"], "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse")
        self.assertEqual(request["provider"], "bedrock")

    def test_converse_stream_reads_the_events(self):
        server = self.serve(scenario())
        r = client(server).converse_stream(modelId=MODEL, messages=HI)
        events = list(r["stream"])
        kinds = [next(iter(e)) for e in events]
        self.assertEqual(kinds[0], "messageStart")
        self.assertEqual(kinds[-2:], ["messageStop", "metadata"])
        text = "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e)
        self.assertEqual(text, ANSWER_TEXT)
        start = next(e["contentBlockStart"] for e in events if "contentBlockStart" in e)
        self.assertEqual(start["start"]["toolUse"]["name"], "read")
        self.assertEqual(events[-2]["messageStop"]["stopReason"], "tool_use")
        self.assertIn("usage", events[-1]["metadata"])

    def test_a_tool_result_sent_back_is_taken(self):
        server = self.serve({"turns": [{"answer": {"text": "It is there."}}]})
        messages = HI + [
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tooluse_1", "name": "read", "input": {"path": "a"}}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "no such file"}], "status": "error"}}]},
        ]
        r = client(server).converse(modelId=MODEL, messages=messages)
        self.assertEqual(r["output"]["message"]["content"][0]["text"], "It is there.")
        [request] = server.requests(1)
        self.assertEqual(request["outcome"]["type"], "answered")

    def test_http_faults_raise_client_errors_with_bedrocks_codes(self):
        for status, code in [(429, "ThrottlingException"), (503, "ServiceUnavailableException"), (424, "ModelNotReadyException")]:
            with self.subTest(status=status):
                server = self.serve(scenario([{"type": "http", "status": status, "error_type": code}]))
                with self.assertRaises(ClientError) as caught:
                    client(server).converse(modelId=MODEL, messages=HI)
                error = caught.exception.response
                self.assertEqual(error["Error"]["Code"], code)
                self.assertEqual(error["ResponseMetadata"]["HTTPStatusCode"], status)

    def test_a_wrong_key_is_refused(self):
        server = self.serve(scenario())
        with self.assertRaises(ClientError) as caught:
            client(server, key="AKIDWRONGKEY0000").converse(modelId=MODEL, messages=HI)
        self.assertEqual(caught.exception.response["ResponseMetadata"]["HTTPStatusCode"], 403)

    def test_an_exception_inside_the_stream_raises_from_it(self):
        fault = {"type": "stream_error", "error_type": "ThrottlingException", "message": "Too many requests, please wait before trying again."}
        server = self.serve(scenario([fault]))
        r = client(server).converse_stream(modelId=MODEL, messages=HI)
        with self.assertRaises(EventStreamError) as caught:
            list(r["stream"])
        self.assertEqual(caught.exception.response["Error"]["Code"], "throttlingException")

    def test_botocores_standard_mode_retries_a_throttle(self):
        server = self.serve(scenario([{"type": "http", "status": 429, "error_type": "ThrottlingException"}]))
        r = client(server, retries=3).converse(modelId=MODEL, messages=HI)
        self.assertEqual(r["stopReason"], "tool_use")
        outcomes = [entry["outcome"] for entry in server.requests(2)]
        self.assertEqual([o["type"] for o in outcomes], ["fault", "answered"])
        self.assertEqual(outcomes[0]["fault"]["status"], 429)


if __name__ == "__main__":
    unittest.main()
