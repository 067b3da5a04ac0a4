"""The Kubernetes objects made from services.txt, for `scripts/services generate`.

Kustomize cannot loop over a list, so the per-service part of deploy/kubernetes/ is written here,
one file per service, and `scripts/services check` fails when it differs from what is committed:
a line added to services.txt brings its Deployment, Service, PodDisruptionBudget,
HorizontalPodAutoscaler, NetworkPolicy and migration Job with the next `generate`. What is the same
for every service (settings, the default-deny policy, the overlays' patches by label) is written by
hand beside it. Written as text, so that scripts/services keeps needing nothing but Python 3.
"""

BASE = "deploy/kubernetes/base/services"
DEV = "deploy/kubernetes/overlays/dev/services"
# Who reads the internal ports (/metrics, /readyz): the cluster's Prometheus, by these labels.
PROMETHEUS_NAMESPACE = "monitoring"
PROMETHEUS_POD = "prometheus"
GATEWAY_PORT = 8080
# The internal listener is the public port + 1000, as ServiceKit defaults it (ADMIN_HTTP_PORT).
ADMIN_OFFSET = 1000
# Resources, per container. Memory: idle resident size and the largest buffers the settings allow;
# CPU: what the event-loop threads can use. docs/DEPLOY.md, "Resources", says which figures of
# docs/BENCHMARKS.md (scripts/bench/idle, scripts/bench/nutrition, scripts/bench/gateway) give them.
EVENT_LOOP_THREADS = 2
SERVICE_RESOURCES = {"requests": {"cpu": "500m", "memory": "96Mi"}, "limits": {"cpu": "2", "memory": "512Mi"}}
# The gateway also holds the open event streams (SSE_MAX_CONNECTIONS of them at most).
GATEWAY_RESOURCES = {"requests": {"cpu": "500m", "memory": "96Mi"}, "limits": {"cpu": "2", "memory": "512Mi"}}
MIGRATION_RESOURCES = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}
# At least two of each in a cluster, so that a drain or a rollout never takes a service away.
MIN_REPLICAS = 2
MAX_REPLICAS = 6
CPU_TARGET = 70
HEADER = "# Generated from services.txt by `scripts/services generate`; `scripts/services check` fails when this\n# file differs. Edit the table or scripts/lib/kube_manifests.py, not this file.\n"


def labels(name, component, indent):
    pad = " " * indent
    return (f"{pad}app.kubernetes.io/name: {name}\n"
            f"{pad}app.kubernetes.io/component: {component}\n")


def resources(spec, indent):
    pad = " " * indent
    out = f"{pad}resources:\n"
    for kind in ("requests", "limits"):
        out += f"{pad}  {kind}: {{ cpu: \"{spec[kind]['cpu']}\", memory: {spec[kind]['memory']} }}\n"
    return out


# The container's half of the hardening; the pod's half (user, group, seccomp) is POD_SECURITY.
CONTAINER_SECURITY = """          securityContext:
            runAsNonRoot: true
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: { drop: [ALL] }
"""
# The image's user (Dockerfile: uid 10001); RuntimeDefault is the runtime's seccomp profile. The
# group owns the files of mounted volumes (fsGroup): a Secret mounted owner- and group-readable
# only (auth's signing key, mode 0440) is root's otherwise, and the process could not read it.
POD_SECURITY = """      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 10001
        runAsGroup: 10001
        fsGroup: 10001
        seccompProfile: { type: RuntimeDefault }
"""
# The root file system is read-only; /tmp is the one place a process may write (image decoding's
# scratch, libraries' temporary files).
TMP_MOUNT = """          volumeMounts:
            - { name: tmp, mountPath: /tmp }
"""
TMP_VOLUME = """      volumes:
        - name: tmp
          emptyDir: { sizeLimit: 64Mi }
"""


def env_block(service, auth_port, public_port, indent=10):
    pad = " " * indent
    out = f"{pad}envFrom:\n{pad}  - configMapRef: {{ name: settings }}\n{pad}env:\n"
    if service is not None:
        out += (f"{pad}  # The service's own login role; the Secret is the operator's (docs/DEPLOY.md).\n"
                f"{pad}  - name: DATABASE_URL\n"
                f"{pad}    valueFrom: {{ secretKeyRef: {{ name: {service}-database, key: DATABASE_URL }} }}\n")
    out += (f"{pad}  - {{ name: HTTP_PORT, value: \"{public_port}\" }}\n"
            f"{pad}  - {{ name: ADMIN_HTTP_PORT, value: \"{public_port + ADMIN_OFFSET}\" }}\n"
            f"{pad}  - {{ name: JWKS_URL, value: \"http://auth:{auth_port}/.well-known/jwks.json\" }}\n"
            f"{pad}  - {{ name: EVENT_LOOP_THREADS, value: \"{EVENT_LOOP_THREADS}\" }}\n")
    return out


READINESS = {
    "service": """          # Readiness is PostgreSQL, Redis and the migrations; liveness only that the process answers,
          # so that an outage of PostgreSQL or Redis takes pods out of the Service but restarts none.
""",
    "gateway": """          # Readiness is the public port open (a starting gateway opens it once it has read the
          # sign-outs it missed, up to 5 s), liveness the process answering. A service with no pod
          # that answers gets `503 upstream_unavailable` on its own routes while the others' are
          # served: readiness on every upstream (/readyz) would take every gateway pod out of the
          # Service, and with it the whole API. /readyz stays, for people and dashboards.
""",
}


def deployment(name, component, port, auth_port, database, extra_env=""):
    admin = port + ADMIN_OFFSET
    spec = GATEWAY_RESOURCES if component == "gateway" else SERVICE_RESOURCES
    return f"""---
# No replicas here: the HorizontalPodAutoscaler owns the count, from its minReplicas up.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  labels:
{labels(name, component, 4)}spec:
  selector:
    matchLabels:
{labels(name, component, 6)}  strategy:
    type: RollingUpdate
    rollingUpdate: {{ maxUnavailable: 0, maxSurge: 1 }}
  template:
    metadata:
      labels:
{labels(name, component, 8)}      annotations:
        prometheus.io/scrape: "true"
        prometheus.io/port: "{admin}"
        prometheus.io/path: /metrics
    spec:
{POD_SECURITY}      # Longer than a request may take (UPSTREAM_TIMEOUT_MS, DATABASE_STATEMENT_TIMEOUT_MS): a
      # stopping process finishes the requests it holds.
      terminationGracePeriodSeconds: 45
      containers:
        - name: {name}
          image: foodbackend-{name}
          args: [serve]
          ports:
            - {{ name: http, containerPort: {port} }}
            - {{ name: admin, containerPort: {admin} }}
{env_block(name if database else None, auth_port, port)}{extra_env}{resources(spec, 10)}{READINESS[component]}          startupProbe:
            httpGet: {{ path: /healthz, port: admin }}
            periodSeconds: 2
            failureThreshold: 30
          readinessProbe:
            {"tcpSocket: { port: http }" if component == "gateway" else "httpGet: { path: /readyz, port: admin }"}
            periodSeconds: 5
            timeoutSeconds: 3
            failureThreshold: 2
          livenessProbe:
            httpGet: {{ path: /healthz, port: admin }}
            periodSeconds: 10
            timeoutSeconds: 3
            failureThreshold: 3
          # The endpoints' removal reaches every node's proxy before the process stops listening.
          lifecycle:
            preStop:
              exec: {{ command: [sleep, "5"] }}
{CONTAINER_SECURITY}{TMP_MOUNT}{TMP_VOLUME}"""


def service_object(name, component, port):
    return f"""---
apiVersion: v1
kind: Service
metadata:
  name: {name}
  labels:
{labels(name, component, 4)}spec:
  selector:
{labels(name, component, 4)}  ports:
    - {{ name: http, port: {port}, targetPort: http }}
"""


def disruption_budget(name, component):
    return f"""---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {name}
  labels:
{labels(name, component, 4)}spec:
  maxUnavailable: 1
  selector:
    matchLabels:
{labels(name, component, 6)}"""


def autoscaler(name, component, minimum):
    return f"""---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {name}
  labels:
{labels(name, component, 4)}spec:
  scaleTargetRef: {{ apiVersion: apps/v1, kind: Deployment, name: {name} }}
  minReplicas: {minimum}
  maxReplicas: {max(MAX_REPLICAS, minimum)}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target: {{ type: Utilization, averageUtilization: {CPU_TARGET} }}
"""


def network_policy(name, component, port, public_from):
    admin = port + ADMIN_OFFSET
    return f"""---
# Its public port from {public_from[0]}; its internal port (/metrics, /readyz) from the cluster's
# Prometheus only. Everything else is refused by default-deny-ingress.
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {name}
  labels:
{labels(name, component, 4)}spec:
  podSelector:
    matchLabels:
{labels(name, component, 6)}  policyTypes: [Ingress]
  ingress:
    - from:
{public_from[1]}      ports:
        - {{ protocol: TCP, port: {port} }}
    - from:
        - namespaceSelector:
            matchLabels: {{ kubernetes.io/metadata.name: {PROMETHEUS_NAMESPACE} }}
          podSelector:
            matchLabels: {{ app.kubernetes.io/name: {PROMETHEUS_POD} }}
      ports:
        - {{ protocol: TCP, port: {admin} }}
"""


def migration_job(name, port, auth_port):
    return f"""---
# Applies {name}'s migrations and exits; a rollout runs it to completion before the Deployment's
# new pods (docs/DEPLOY.md). Delete the finished Job before applying a new image: a Job's pod
# template cannot change.
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}-migrate
  labels:
{labels(name, "migration", 4)}spec:
  backoffLimit: 2
  template:
    metadata:
      labels:
{labels(name, "migration", 8)}    spec:
{POD_SECURITY}      restartPolicy: Never
      containers:
        - name: migrate
          image: foodbackend-{name}
          args: [migrate]
{env_block(name, auth_port, port)}{resources(MIGRATION_RESOURCES, 10)}{CONTAINER_SECURITY}{TMP_MOUNT}{TMP_VOLUME}"""


FROM_GATEWAY = """        - podSelector:
            matchLabels: { app.kubernetes.io/name: gateway, app.kubernetes.io/component: gateway }
"""
# auth's public port also serves its public keys (/.well-known/jwks.json), which every service and
# the gateway fetch to check access tokens.
FROM_GATEWAY_AND_SERVICES = FROM_GATEWAY + """        - podSelector:
            matchLabels: { app.kubernetes.io/component: service }
"""
FROM_ANYWHERE = """        - ipBlock: { cidr: 0.0.0.0/0 }
        - ipBlock: { cidr: "::/0" }
"""


def service_file(service, auth_port, signing_key_holder):
    name = service.name
    public_from = ("the gateway, and from every service for the public keys", FROM_GATEWAY_AND_SERVICES) \
        if name == signing_key_holder else ("the gateway", FROM_GATEWAY)
    return (HEADER
            + deployment(name, "service", service.port, auth_port, database=True)
            + service_object(name, "service", service.port)
            + disruption_budget(name, "service")
            + autoscaler(name, "service", max(MIN_REPLICAS, service.replicas))
            + network_policy(name, "service", service.port, public_from)
            + migration_job(name, service.port, auth_port))


def gateway_file(services, auth_port):
    urls = "".join(f"            - {{ name: {s.name.upper()}_URL, value: \"http://{s.name}:{s.port}\" }}\n" for s in services)
    extra = ("            # Each service by its Service's name and port.\n" + urls
             + "            # The ingress controller's pods, whose X-Forwarded-For names the client (the rate limits\n"
             + "            # count clients by address): narrow it to the cluster's pod network.\n"
             + "            - { name: TRUSTED_PROXIES, value: \"10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7\" }\n")
    return (HEADER
            + deployment("gateway", "gateway", GATEWAY_PORT, auth_port, database=False, extra_env=extra)
            + service_object("gateway", "gateway", GATEWAY_PORT)
            + disruption_budget("gateway", "gateway")
            + autoscaler("gateway", "gateway", MIN_REPLICAS)
            + network_policy("gateway", "gateway", GATEWAY_PORT, ("anywhere (the ingress controller)", FROM_ANYWHERE)))


def base_kustomization(services):
    files = "".join(f"  - {s.name}.yaml\n" for s in services)
    return HEADER + f"""apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - gateway.yaml
{files}"""


def dev_component(services):
    """The dev overlay's per-service part: a DATABASE_URL without a Secret (its PostgreSQL trusts the
    cluster's pods, and a NetworkPolicy admits only the services), the role and schema made by
    `<service> provision` before each migration, and the locally built images."""
    out = HEADER + """apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
images:
"""
    for name in ["gateway"] + [s.name for s in services]:
        out += f"  - {{ name: foodbackend-{name}, newTag: local }}\n"
    out += "patches:\n"
    for service in services:
        name = service.name
        url = f"postgres://{name}@postgres:5432/foodbackend"
        env = f"""                env:
                  - name: DATABASE_URL
                    value: {url}
                    valueFrom: null
"""
        out += f"""  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {{ name: {name} }}
      spec:
        template:
          spec:
            containers:
              - name: {name}
{env}  - patch: |-
      apiVersion: batch/v1
      kind: Job
      metadata: {{ name: {name}-migrate }}
      spec:
        template:
          spec:
            initContainers:
              - name: provision
                image: foodbackend-{name}
                args: [provision]
                envFrom:
                  - configMapRef: {{ name: settings }}
                env:
                  - {{ name: DATABASE_URL, value: "{url}" }}
                  - {{ name: DATABASE_ADMIN_URL, value: "postgres://postgres@postgres:5432/foodbackend" }}
{resources(MIGRATION_RESOURCES, 16)}                securityContext:
                  runAsNonRoot: true
                  allowPrivilegeEscalation: false
                  readOnlyRootFilesystem: true
                  capabilities: {{ drop: [ALL] }}
            containers:
              - name: migrate
{env}"""
    return out


def generated(services, signing_key_holder):
    """path → text of every file this module writes (the folders BASE and DEV are wholly its own)."""
    by_name = {s.name: s for s in services}
    auth_port = by_name[signing_key_holder].port if signing_key_holder in by_name else services[0].port
    files = {f"{BASE}/kustomization.yaml": base_kustomization(services), f"{BASE}/gateway.yaml": gateway_file(services, auth_port)}
    for service in services:
        files[f"{BASE}/{service.name}.yaml"] = service_file(service, auth_port, signing_key_holder)
    files[f"{DEV}/kustomization.yaml"] = dev_component(services)
    return files
