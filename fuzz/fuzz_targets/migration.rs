#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| csi_pv_controller::fuzz::migration(data));
