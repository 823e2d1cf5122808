//! A small Kubernetes API server for tests: real HTTP on 127.0.0.1, real JSON, kube-rs on the
//! other side.
//!
//! Supports, for namespaced ServiceAccounts, Secrets, ConfigMaps, Deployments,
//! PodDisruptionBudgets and (optionally, as if their CRDs were installed) KEDA ScaledObjects and
//! TriggerAuthentications and Prometheus Operator PodMonitors: get, list (with `labelSelector` equality terms), create (201, or 409
//! `AlreadyExists`), replace (resourceVersion precondition → 409 `Conflict`), merge-patch,
//! server-side apply as an upsert by one manager (the applied object replaces the previous one,
//! keeping server-set metadata and status), and delete (404 `NotFound` when gone). It validates
//! object names as DNS-1123 subdomains and custom resources against their CRDs' schemas
//! ([`super::crd`]), both 422 `Invalid`, and bumps `metadata.generation` when a
//! Deployment's spec changes. Deployment status is scripted by the test: either every write
//! completes the rollout at once ([`Rollouts::Complete`]) or the test sets it
//! ([`FakeApiServer::set_rollout`]). A test can forbid one object to bootstrap's role
//! ([`FakeApiServer::forbid`]: 403 `Forbidden`, as RBAC answers). Field ownership of real
//! server-side apply is not modelled.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// How Deployment status evolves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rollouts {
    /// Every write of a Deployment completes its rollout immediately.
    Complete,
    /// Status changes only when the test calls [`FakeApiServer::set_rollout`].
    Manual,
}

/// A status the test gives a Deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RolloutScript {
    /// Observed, all replicas updated and available.
    Complete,
    /// Observed, no replica updated yet.
    Progressing,
    /// `Progressing` condition with reason `ProgressDeadlineExceeded`.
    DeadlineExceeded,
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    /// HTTP method.
    pub(crate) method: Method,
    /// Path.
    pub(crate) path: String,
    /// Query string.
    pub(crate) query: String,
    /// Content-Type header.
    pub(crate) content_type: String,
}

type Hook = Box<dyn FnOnce(&mut Store) + Send>;

/// The object store, visible to hooks.
pub(crate) struct Store {
    objects: BTreeMap<String, Value>,
    rv: u64,
    rollouts: Rollouts,
    crds: bool,
    hooks: Vec<(Method, String, Hook)>,
    forbidden: Vec<String>,
    requests: Vec<Recorded>,
}

impl Store {
    fn next_rv(&mut self) -> String {
        self.rv += 1;
        self.rv.to_string()
    }

    /// Overwrites `data` of a stored ConfigMap at `path` (bumping its resourceVersion), as
    /// another writer would.
    pub(crate) fn set_configmap_data(&mut self, path: &str, data: Value) {
        let rv = self.next_rv();
        let obj = self.objects.get_mut(path).expect("object exists");
        obj["data"] = data;
        obj["metadata"]["resourceVersion"] = json!(rv);
    }

    /// Inserts an object as if created by someone else.
    pub(crate) fn insert(&mut self, path: &str, mut obj: Value) {
        let rv = self.next_rv();
        obj["metadata"]["resourceVersion"] = json!(rv);
        obj["metadata"]["uid"] = json!(format!("uid-{rv}"));
        self.objects.insert(path.to_string(), obj);
    }
}

/// The fake server; dropped = stopped.
pub(crate) struct FakeApiServer {
    /// Base URL, e.g. `http://127.0.0.1:12345`.
    pub(crate) url: String,
    store: Arc<Mutex<Store>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Path of a namespaced object, as kube-rs requests it.
pub(crate) fn object_path(ns: &str, plural: &str, name: &str) -> String {
    let prefix = match plural {
        "deployments" => "/apis/apps/v1",
        "scaledobjects" | "triggerauthentications" => "/apis/keda.sh/v1alpha1",
        "podmonitors" => "/apis/monitoring.coreos.com/v1",
        "poddisruptionbudgets" => "/apis/policy/v1",
        _ => "/api/v1",
    };
    format!("{prefix}/namespaces/{ns}/{plural}/{name}")
}

fn kind_of(plural: &str) -> Option<(&'static str, &'static str)> {
    Some(match plural {
        "serviceaccounts" => ("ServiceAccount", "v1"),
        "secrets" => ("Secret", "v1"),
        "configmaps" => ("ConfigMap", "v1"),
        "deployments" => ("Deployment", "apps/v1"),
        "poddisruptionbudgets" => ("PodDisruptionBudget", "policy/v1"),
        "scaledobjects" => ("ScaledObject", "keda.sh/v1alpha1"),
        "triggerauthentications" => ("TriggerAuthentication", "keda.sh/v1alpha1"),
        "podmonitors" => ("PodMonitor", "monitoring.coreos.com/v1"),
        _ => return None,
    })
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": if code.is_success() { "Success" } else { "Failure" },
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (
        code,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn ok(code: StatusCode, v: &Value) -> Response {
    (code, [("content-type", "application/json")], v.to_string()).into_response()
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                    }
                    Err(_) => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn rollout_status(d: &Value, script: RolloutScript) -> Value {
    let generation = d["metadata"]["generation"].as_i64().unwrap_or(1);
    let replicas = d["spec"]["replicas"].as_i64().unwrap_or(1);
    match script {
        RolloutScript::Complete => json!({
            "observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
            "readyReplicas": replicas, "availableReplicas": replicas,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            ],
        }),
        RolloutScript::Progressing => json!({
            "observedGeneration": generation, "replicas": replicas, "updatedReplicas": 0,
            "readyReplicas": 0, "availableReplicas": 0,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}],
        }),
        RolloutScript::DeadlineExceeded => json!({
            "observedGeneration": generation, "replicas": replicas, "updatedReplicas": 0,
            "readyReplicas": 0, "availableReplicas": 0, "unavailableReplicas": replicas,
            "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                            "message": "ReplicaSet has timed out progressing."}],
        }),
    }
}

impl FakeApiServer {
    /// Starts a fake with KEDA's and the Prometheus Operator's CRDs installed.
    pub(crate) async fn start(rollouts: Rollouts) -> FakeApiServer {
        Self::start_with(rollouts, true).await
    }

    /// Starts a fake; `crds` = whether the custom resources (KEDA's, the Prometheus Operator's)
    /// exist.
    pub(crate) async fn start_with(rollouts: Rollouts, crds: bool) -> FakeApiServer {
        let store = Arc::new(Mutex::new(Store {
            objects: BTreeMap::new(),
            rv: 100,
            rollouts,
            crds,
            hooks: Vec::new(),
            forbidden: Vec::new(),
            requests: Vec::new(),
        }));
        let app = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&store));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeApiServer { url, store, task }
    }

    /// A kube client talking to this fake.
    pub(crate) fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().expect("url"));
        kube::Client::try_from(config).expect("client")
    }

    /// A stored object.
    pub(crate) fn get(&self, ns: &str, plural: &str, name: &str) -> Option<Value> {
        self.store
            .lock()
            .unwrap()
            .objects
            .get(&object_path(ns, plural, name))
            .cloned()
    }

    /// Names of stored objects of a kind in a namespace.
    pub(crate) fn names(&self, ns: &str, plural: &str) -> Vec<String> {
        let prefix = object_path(ns, plural, "");
        self.store
            .lock()
            .unwrap()
            .objects
            .keys()
            .filter_map(|k| k.strip_prefix(&prefix).map(str::to_string))
            .collect()
    }

    /// Stores an object as if created by someone else.
    pub(crate) fn put(&self, ns: &str, plural: &str, name: &str, obj: Value) {
        self.store
            .lock()
            .unwrap()
            .insert(&object_path(ns, plural, name), obj);
    }

    /// Answers every request for this object 403 `Forbidden`, as RBAC does for a role without
    /// the verb.
    pub(crate) fn forbid(&self, ns: &str, plural: &str, name: &str) {
        (self.store.lock().unwrap().forbidden).push(object_path(ns, plural, name));
    }

    /// Every request so far.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.store.lock().unwrap().requests.clone()
    }

    /// Sets a Deployment's status (for [`Rollouts::Manual`]).
    pub(crate) fn set_rollout(&self, ns: &str, name: &str, script: RolloutScript) {
        let mut s = self.store.lock().unwrap();
        let rv = s.next_rv();
        let d = s
            .objects
            .get_mut(&object_path(ns, "deployments", name))
            .expect("deployment exists");
        d["status"] = rollout_status(d, script);
        d["metadata"]["resourceVersion"] = json!(rv);
    }

    /// Runs `f` on the store right before the next `method` request whose path ends with
    /// `path_suffix` is handled (simulates another writer getting in first).
    pub(crate) fn before_next(
        &self,
        method: Method,
        path_suffix: &str,
        f: impl FnOnce(&mut Store) + Send + 'static,
    ) {
        self.store
            .lock()
            .unwrap()
            .hooks
            .push((method, path_suffix.to_string(), Box::new(f)));
    }

    /// Waits (yielding, no timing) until `pred` holds over the request log.
    pub(crate) async fn until_requests(&self, pred: impl Fn(&[Recorded]) -> bool) {
        loop {
            if pred(&self.store.lock().unwrap().requests) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

async fn handle(State(store): State<Arc<Mutex<Store>>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(Body::new(body), 16 << 20).await {
        Ok(b) => b,
        Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", e.to_string()),
    };
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or("").to_string();
    let content_type = parts
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut s = store.lock().unwrap();
    s.requests.push(Recorded {
        method: parts.method.clone(),
        path: path.clone(),
        query: query.clone(),
        content_type: content_type.clone(),
    });
    if let Some(i) = s
        .hooks
        .iter()
        .position(|(m, suffix, _)| *m == parts.method && path.ends_with(suffix.as_str()))
    {
        let (_, _, hook) = s.hooks.remove(i);
        hook(&mut s);
    }

    if s.forbidden.contains(&path) {
        let (plural, name) = path
            .rsplit_once('/')
            .map(|(c, n)| (c.rsplit('/').next().unwrap_or(""), n))
            .unwrap_or_default();
        return status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!("{plural} \"{name}\" is forbidden: User \"system:serviceaccount:mlobs:observation-publisher-bootstrap\" cannot {} resource \"{plural}\"", parts.method.as_str().to_lowercase()),
        );
    }
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let Some(ns_at) = segs.iter().position(|x| *x == "namespaces") else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("no route for {path}"),
        );
    };
    let (Some(plural), name) = (segs.get(ns_at + 2).copied(), segs.get(ns_at + 3).copied()) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("no route for {path}"),
        );
    };
    let Some((kind, api_version)) = kind_of(plural) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("the server could not find the requested resource {plural}"),
        );
    };
    if super::crd::is_custom(plural) && !s.crds {
        // A real API server without the CRD answers a bare 404 page.
        return (StatusCode::NOT_FOUND, "404 page not found\n").into_response();
    }
    let ns = segs[ns_at + 1].to_string();
    let collection = format!("/{}", segs[..ns_at + 3].join("/"));
    let key = name.map(|n| format!("{collection}/{n}"));
    let body: Option<Value> = if bytes.is_empty() {
        None
    } else {
        match serde_json::from_slice(&bytes) {
            Ok(v) => Some(v),
            Err(e) => {
                return status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    format!("body is not JSON: {e}"),
                )
            }
        }
    };
    let not_found = |n: &str| {
        status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("{plural} \"{n}\" not found"),
        )
    };

    match (parts.method.clone(), key) {
        (Method::GET, Some(key)) => match s.objects.get(&key) {
            Some(o) => ok(StatusCode::OK, o),
            None => not_found(name.unwrap_or("")),
        },
        (Method::GET, None) => {
            let selector = query_param(&query, "labelSelector").unwrap_or_default();
            let terms: Vec<(String, String)> = selector
                .split(',')
                .filter(|t| !t.is_empty())
                .filter_map(|t| {
                    t.split_once('=')
                        .map(|(k, v)| (k.trim_end_matches('=').to_string(), v.to_string()))
                })
                .collect();
            let prefix = format!("{collection}/");
            let items: Vec<Value> = s
                .objects
                .iter()
                .filter(|(k, _)| k.starts_with(&prefix))
                .map(|(_, v)| v.clone())
                .filter(|o| {
                    terms
                        .iter()
                        .all(|(k, v)| o["metadata"]["labels"][k].as_str() == Some(v))
                })
                .collect();
            let rv = s.rv.to_string();
            ok(
                StatusCode::OK,
                &json!({"kind": format!("{kind}List"), "apiVersion": api_version, "metadata": {"resourceVersion": rv}, "items": items}),
            )
        }
        (Method::POST, None) => {
            let Some(mut obj) = body else {
                return status(StatusCode::BAD_REQUEST, "BadRequest", "no body".into());
            };
            let Some(n) = obj["metadata"]["name"].as_str().map(str::to_string) else {
                return status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    "metadata.name: Required value".into(),
                );
            };
            if !is_dns_subdomain(&n) {
                return status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    format!("metadata.name: Invalid value: {n:?}"),
                );
            }
            if obj["metadata"]
                .get("resourceVersion")
                .is_some_and(|v| !v.is_null())
            {
                return status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    "resourceVersion should not be set on objects to be created".into(),
                );
            }
            let key = format!("{collection}/{n}");
            if s.objects.contains_key(&key) {
                return status(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    format!("{plural} \"{n}\" already exists"),
                );
            }
            let rv = s.next_rv();
            init_new(&mut obj, kind, api_version, &ns, &rv);
            if let Some(refused) = invalid(plural, &obj) {
                return refused;
            }
            finish_write(&mut obj, None, s.rollouts);
            s.objects.insert(key, obj.clone());
            ok(StatusCode::CREATED, &obj)
        }
        (Method::PUT, Some(key)) => {
            let n = name.unwrap_or("");
            let Some(mut obj) = body else {
                return status(StatusCode::BAD_REQUEST, "BadRequest", "no body".into());
            };
            let Some(old) = s.objects.get(&key).cloned() else {
                return not_found(n);
            };
            if let Some(want) = obj["metadata"]["resourceVersion"].as_str() {
                if Some(want) != old["metadata"]["resourceVersion"].as_str() {
                    return status(
                        StatusCode::CONFLICT,
                        "Conflict",
                        format!("Operation cannot be fulfilled on {plural} \"{n}\": the object has been modified; please apply your changes to the latest version and try again"),
                    );
                }
            }
            let rv = s.next_rv();
            carry_server_fields(&mut obj, &old, kind, api_version, &rv);
            if let Some(refused) = invalid(plural, &obj) {
                return refused;
            }
            finish_write(&mut obj, Some(&old), s.rollouts);
            s.objects.insert(key, obj.clone());
            ok(StatusCode::OK, &obj)
        }
        (Method::PATCH, Some(key)) => {
            let n = name.unwrap_or("");
            let Some(patch) = body else {
                return status(StatusCode::BAD_REQUEST, "BadRequest", "no body".into());
            };
            let old = s.objects.get(&key).cloned();
            if let (Some(o), Some(want)) = (&old, patch["metadata"]["resourceVersion"].as_str()) {
                if Some(want) != o["metadata"]["resourceVersion"].as_str() {
                    return status(
                        StatusCode::CONFLICT,
                        "Conflict",
                        format!("the object {plural} \"{n}\" has been modified"),
                    );
                }
            }
            let mut obj = if content_type.starts_with("application/apply-patch") {
                if query_param(&query, "fieldManager").is_none() {
                    return status(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value"
                            .into(),
                    );
                }
                if !is_dns_subdomain(n) {
                    return status(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Invalid",
                        format!("metadata.name: Invalid value: {n:?}"),
                    );
                }
                patch
            } else if content_type.starts_with("application/merge-patch")
                || content_type.starts_with("application/strategic-merge-patch")
            {
                let Some(mut o) = old.clone() else {
                    return not_found(n);
                };
                merge_patch(&mut o, &patch);
                o
            } else {
                return status(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    format!("{content_type} is not supported by the fake"),
                );
            };
            let rv = s.next_rv();
            match &old {
                Some(o) => carry_server_fields(&mut obj, o, kind, api_version, &rv),
                None => init_new(&mut obj, kind, api_version, &ns, &rv),
            }
            if let Some(refused) = invalid(plural, &obj) {
                return refused;
            }
            finish_write(&mut obj, old.as_ref(), s.rollouts);
            s.objects.insert(key, obj.clone());
            ok(
                if old.is_some() {
                    StatusCode::OK
                } else {
                    StatusCode::CREATED
                },
                &obj,
            )
        }
        (Method::DELETE, Some(key)) => match s.objects.remove(&key) {
            Some(_) => status(StatusCode::OK, "", String::new()),
            None => not_found(name.unwrap_or("")),
        },
        (m, _) => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("{m} {path}"),
        ),
    }
}

/// A custom resource that does not fit its CRD's schema: 422 `Invalid`, as the API server
/// answers, listing every problem.
fn invalid(plural: &str, obj: &Value) -> Option<Response> {
    if !super::crd::is_custom(plural) {
        return None;
    }
    let errors = super::crd::validate(plural, obj);
    (!errors.is_empty()).then(|| {
        status(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!(
                "{plural} {:?} is invalid: {}",
                obj["metadata"]["name"],
                errors.join(", ")
            ),
        )
    })
}

fn init_new(obj: &mut Value, kind: &str, api_version: &str, ns: &str, rv: &str) {
    obj["kind"] = json!(kind);
    obj["apiVersion"] = json!(api_version);
    let m = &mut obj["metadata"];
    m["namespace"] = json!(ns);
    m["resourceVersion"] = json!(rv);
    m["uid"] = json!(format!("uid-{rv}"));
    m["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    if kind == "Deployment" {
        m["generation"] = json!(1);
    }
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
}

fn carry_server_fields(obj: &mut Value, old: &Value, kind: &str, api_version: &str, rv: &str) {
    obj["kind"] = json!(kind);
    obj["apiVersion"] = json!(api_version);
    for f in ["namespace", "uid", "creationTimestamp", "generation"] {
        obj["metadata"][f] = old["metadata"][f].clone();
    }
    obj["metadata"]["resourceVersion"] = json!(rv);
    // Status is a subresource: writes to the object never change it.
    match old.get("status") {
        Some(st) => obj["status"] = st.clone(),
        None => {
            if let Some(o) = obj.as_object_mut() {
                o.remove("status");
            }
        }
    }
}

fn finish_write(obj: &mut Value, old: Option<&Value>, rollouts: Rollouts) {
    if obj["kind"] != "Deployment" {
        return;
    }
    if let Some(old) = old {
        if old["spec"] != obj["spec"] {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
            obj["metadata"]["generation"] = json!(g);
        }
    }
    if rollouts == Rollouts::Complete {
        obj["status"] = rollout_status(obj, RolloutScript::Complete);
    }
}
