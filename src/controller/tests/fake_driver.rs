//! A CSI driver in memory: answers from a script, else success, and a record of every call with
//! what the API held for the claim at that moment.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::fake_api::FakeApi;
use crate::csi::driver::Answer;
use crate::csi::{About, CsiError, Driver, v1 as csi};

#[derive(Default)]
pub struct Calls {
    /// CreateVolume names, in order, each with the claim's finalizers as the API had them.
    pub creates: Vec<(String, Value)>,
    pub deletes: Vec<String>,
    /// ControllerExpandVolume's required bytes, in order.
    pub expands: Vec<i64>,
    pub probes: usize,
}

pub struct FakeDriver {
    api: FakeApi,
    /// Where the claim under test lives in the fake API (collection, name).
    claim: (String, String),
    /// Answers for the next CreateVolume calls; when empty, success.
    pub create_answers: Mutex<VecDeque<CsiError>>,
    /// Answers for the next ControllerExpandVolume calls; when empty, success.
    pub expand_answers: Mutex<VecDeque<CsiError>>,
    pub calls: Arc<Mutex<Calls>>,
}

impl FakeDriver {
    pub fn new(api: FakeApi, claim: (String, String)) -> Self {
        FakeDriver {
            api,
            claim,
            create_answers: Mutex::default(),
            expand_answers: Mutex::default(),
            calls: Arc::default(),
        }
    }

    pub fn fail_next_create(&self, error: CsiError) {
        self.create_answers.lock().unwrap().push_back(error);
    }

    pub fn fail_next_expand(&self, error: CsiError) {
        self.expand_answers.lock().unwrap().push_back(error);
    }

    pub fn expands(&self) -> Vec<i64> {
        self.calls.lock().unwrap().expands.clone()
    }

    pub fn creates(&self) -> Vec<(String, Value)> {
        self.calls.lock().unwrap().creates.clone()
    }

    pub fn deletes(&self) -> Vec<String> {
        self.calls.lock().unwrap().deletes.clone()
    }
}

pub fn status(code: tonic::Code) -> CsiError {
    CsiError::Status { method: "CreateVolume", code, message: "scripted".into() }
}

impl Driver for FakeDriver {
    fn create_volume(
        &self,
        request: csi::CreateVolumeRequest,
        _: About,
    ) -> Answer<'_, csi::Volume> {
        Box::pin(async move {
            let claim = {
                let state = self.api.state.lock().unwrap();
                state.get(&self.claim.0, &self.claim.1)
            };
            let finalizers =
                claim.map(|c| c["metadata"]["finalizers"].clone()).unwrap_or(Value::Null);
            self.calls.lock().unwrap().creates.push((request.name.clone(), finalizers));
            if let Some(error) = self.create_answers.lock().unwrap().pop_front() {
                return Err(error);
            }
            let bytes = request.capacity_range.map_or(0, |r| r.required_bytes);
            Ok(csi::Volume {
                capacity_bytes: bytes,
                volume_id: format!("id-{}", request.name),
                content_source: request.volume_content_source,
                ..Default::default()
            })
        })
    }

    fn delete_volume(&self, request: csi::DeleteVolumeRequest, _: About) -> Answer<'_, ()> {
        Box::pin(async move {
            self.calls.lock().unwrap().deletes.push(request.volume_id);
            Ok(())
        })
    }

    fn controller_expand_volume(
        &self,
        request: csi::ControllerExpandVolumeRequest,
        _: About,
    ) -> Answer<'_, csi::ControllerExpandVolumeResponse> {
        Box::pin(async move {
            let bytes = request.capacity_range.map_or(0, |r| r.required_bytes);
            self.calls.lock().unwrap().expands.push(bytes);
            if let Some(error) = self.expand_answers.lock().unwrap().pop_front() {
                return Err(error);
            }
            Ok(csi::ControllerExpandVolumeResponse {
                capacity_bytes: bytes,
                node_expansion_required: false,
            })
        })
    }

    fn controller_modify_volume(
        &self,
        _request: csi::ControllerModifyVolumeRequest,
    ) -> Answer<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn probe(&self) -> Answer<'_, bool> {
        Box::pin(async move {
            self.calls.lock().unwrap().probes += 1;
            Ok(true)
        })
    }
}
