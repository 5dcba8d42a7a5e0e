#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rebound_fuzz::stream_bedrock(data));
