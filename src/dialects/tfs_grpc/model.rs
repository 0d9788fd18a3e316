//! Model metadata (`GetModelMetadata`) and `tensorflow.serving.ModelService`:
//! version statuses and config reloads, on the registry REST uses too.

use std::sync::Arc;

use prost::Message;
use tonic::{Request, Response, Status};

use super::{address, named_address};
use crate::call::grpc::Call;
use crate::codec::tensor_proto::shape_proto;
use crate::error::ApiError;
use crate::model_config::{ModelSource, VersionPolicy};
use crate::proto::tensorflow::error::Code as ErrorCode;
use crate::proto::tensorflow::serving::file_system_storage_path_source_config::servable_version_policy::PolicyChoice;
use crate::proto::tensorflow::serving::model_server_config::Config;
use crate::proto::tensorflow::serving::model_service_server::ModelService;
use crate::proto::tensorflow::serving::model_spec::VersionChoice;
use crate::proto::tensorflow::serving::model_version_status::State;
use crate::proto::tensorflow::serving::{
    GetModelMetadataRequest, GetModelMetadataResponse, GetModelStatusRequest, GetModelStatusResponse, ModelConfig,
    ModelSpec, ModelVersionStatus, ReloadConfigRequest, ReloadConfigResponse, SignatureDefMap, StatusProto,
};
use crate::proto::tensorflow::{tensor_info, SignatureDef, TensorInfo, TensorShapeProto};
use crate::server::ServerState;
use crate::service::Service;
use crate::service::VersionState;
use crate::signature::TensorSpec;
use crate::tfs::TfsError;

/// The `type_url` TF Serving packs the signature map under.
const SIGNATURE_DEF_MAP_URL: &str = "type.googleapis.com/tensorflow.serving.SignatureDefMap";

/// `GetModelMetadata`: the signature defs, the only field TF Serving answers.
pub fn metadata(service: &Service, request: &GetModelMetadataRequest) -> Result<GetModelMetadataResponse, ApiError> {
    let (model, selector) = named_address(request.model_spec.as_ref())?;
    if request.metadata_field.is_empty() {
        return Err(ApiError::BadRequest(
            "GetModelMetadataRequest must specify at least one metadata_field".into(),
        ));
    }
    if let Some(field) = request.metadata_field.iter().find(|f| *f != "signature_def") {
        return Err(TfsError::MetadataField(field.clone()).into());
    }
    let servable = service.servable(model, &selector)?;
    let signature_def = servable
        .runtime
        .signatures()
        .iter()
        .map(|signature| {
            let def = SignatureDef {
                inputs: tensor_infos(&signature.inputs),
                outputs: tensor_infos(&signature.outputs),
                method_name: signature.method_name.clone(),
                ..SignatureDef::default()
            };
            (signature.name.clone(), def)
        })
        .collect();
    let packed = prost_types::Any {
        type_url: SIGNATURE_DEF_MAP_URL.into(),
        value: SignatureDefMap { signature_def }.encode_to_vec(),
    };
    Ok(GetModelMetadataResponse {
        model_spec: Some(ModelSpec {
            name: model.to_string(),
            signature_name: String::new(),
            version_choice: Some(VersionChoice::Version(servable.version)),
        }),
        metadata: [("signature_def".to_string(), packed)].into_iter().collect(),
    })
}

fn tensor_infos(specs: &[TensorSpec]) -> std::collections::BTreeMap<String, TensorInfo> {
    specs
        .iter()
        .map(|spec| {
            let shape = match &spec.shape {
                None => TensorShapeProto {
                    dim: Vec::new(),
                    unknown_rank: true,
                },
                Some(dims) => {
                    let mut shape = shape_proto(&[]);
                    shape.dim = dims
                        .iter()
                        .map(|&size| crate::proto::tensorflow::tensor_shape_proto::Dim {
                            size,
                            name: String::new(),
                        })
                        .collect();
                    shape
                }
            };
            let info = TensorInfo {
                dtype: spec.dtype.to_proto(),
                tensor_shape: Some(shape),
                encoding: Some(tensor_info::Encoding::Name(spec.tensor_name.clone())),
            };
            (spec.key.clone(), info)
        })
        .collect()
}

/// `tensorflow.serving.ModelService`.
pub struct ModelApi {
    pub state: Arc<ServerState>,
}

#[tonic::async_trait]
impl ModelService for ModelApi {
    async fn get_model_status(
        &self,
        request: Request<GetModelStatusRequest>,
    ) -> Result<Response<GetModelStatusResponse>, Status> {
        let call = Call::begin(&self.state, &request, "status")?;
        let request = request.into_inner();
        let model = request.model_spec.as_ref().map(|s| s.name.clone()).unwrap_or_default();
        let result = status(&self.state.service, &request);
        call.finish(result, &model)
    }

    async fn handle_reload_config_request(
        &self,
        request: Request<ReloadConfigRequest>,
    ) -> Result<Response<ReloadConfigResponse>, Status> {
        let call = Call::begin(&self.state, &request, "reload_config")?;
        let result = reload(&self.state, request.into_inner()).await;
        call.finish(result, "")
    }
}

fn status(service: &Service, request: &GetModelStatusRequest) -> Result<GetModelStatusResponse, ApiError> {
    let (model, selector) = address(request.model_spec.as_ref())?;
    let statuses = service.versions(model, &selector)?;
    let model_version_status = statuses
        .iter()
        .map(|s| ModelVersionStatus {
            version: s.version,
            state: state_of(s.state) as i32,
            status: Some(StatusProto {
                error_code: if s.error.is_some() {
                    ErrorCode::Unknown
                } else {
                    ErrorCode::Ok
                } as i32,
                error_message: s.error.clone().unwrap_or_default(),
            }),
        })
        .collect();
    Ok(GetModelStatusResponse { model_version_status })
}

fn state_of(state: VersionState) -> State {
    match state {
        VersionState::Start => State::Start,
        VersionState::Loading => State::Loading,
        VersionState::Available => State::Available,
        VersionState::Unloading => State::Unloading,
        VersionState::End => State::End,
    }
}

/// Serves exactly the models the new config lists (as TF Serving does),
/// each base path confined to `--model_roots` like every load over the network.
async fn reload(state: &ServerState, request: ReloadConfigRequest) -> Result<ReloadConfigResponse, ApiError> {
    let configs = match request.config.and_then(|c| c.config) {
        Some(Config::ModelConfigList(list)) => list.config,
        None => {
            return Err(ApiError::BadRequest(
                "ModelServerConfig is missing its model_config_list".into(),
            ))
        }
    };
    let mut sources = Vec::with_capacity(configs.len());
    for config in configs {
        let mut source = source_of(config)?;
        source.base_path = state
            .service
            .confine(&source.base_path.display().to_string(), &source.name)?;
        sources.push(source);
    }
    state.service.replace_all(sources).await?;
    Ok(ReloadConfigResponse {
        status: Some(StatusProto {
            error_code: ErrorCode::Ok as i32,
            error_message: String::new(),
        }),
        metric: Vec::new(),
    })
}

fn source_of(config: ModelConfig) -> Result<ModelSource, ApiError> {
    if !matches!(config.model_platform.as_str(), "" | "tensorflow") {
        return Err(TfsError::ModelPlatform {
            model: config.name,
            platform: config.model_platform,
        }
        .into());
    }
    if config.name.is_empty() || config.base_path.is_empty() {
        return Err(ApiError::BadRequest(
            "every ModelConfig needs a name and a base_path".into(),
        ));
    }
    let policy = match config.model_version_policy.and_then(|p| p.policy_choice) {
        None => VersionPolicy::Latest(1),
        Some(PolicyChoice::Latest(latest)) => VersionPolicy::Latest(latest.num_versions.max(1) as usize),
        Some(PolicyChoice::All(_)) => VersionPolicy::All,
        Some(PolicyChoice::Specific(specific)) => VersionPolicy::Specific(specific.versions),
    };
    let mut source = ModelSource::with_policy(config.name, config.base_path, policy);
    source.labels = config.version_labels.into_iter().collect();
    Ok(source)
}
