{{/* The namespace every namespaced object goes to: namespace.name, or the release's namespace. */}}
{{- define "podtailor.namespace" -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
{{- end -}}

{{- define "podtailor.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
metadata.labels of every object: the kustomize base's (name, component, part-of) and Helm's own.
Call with (dict "root" $ "component" "recommender"); component may be omitted.
*/}}
{{- define "podtailor.labels" -}}
app.kubernetes.io/name: podtailor
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
app.kubernetes.io/part-of: podtailor
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector (and pod template) labels of one component. */}}
{{- define "podtailor.selector" -}}
app.kubernetes.io/name: podtailor
app.kubernetes.io/component: {{ . }}
{{- end -}}

{{/* The pod-level security context: the "restricted" Pod Security Standard. */}}
{{- define "podtailor.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "podtailor.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* Startup, liveness and readiness probes on /healthz and /readyz. Call with (dict "port" "metrics" "scheme" ""). */}}
{{- define "podtailor.probes" -}}
startupProbe:
  httpGet: {path: /healthz, port: {{ .port }}{{ with .scheme }}, scheme: {{ . }}{{ end }}}
  periodSeconds: 2
  failureThreshold: 30
livenessProbe:
  httpGet: {path: /healthz, port: {{ .port }}{{ with .scheme }}, scheme: {{ . }}{{ end }}}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: {{ .port }}{{ with .scheme }}, scheme: {{ . }}{{ end }}}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
{{- end -}}

{{/* The Deployment spec shared by the three components, up to the containers. Call with (dict "root" $ "component" "updater" "replicas" 2). */}}
{{- define "podtailor.deploymentHead" -}}
replicas: {{ .replicas }}
revisionHistoryLimit: 3
selector:
  matchLabels:
    {{- include "podtailor.selector" .component | nindent 4 }}
strategy:
  type: RollingUpdate
  rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
{{- end -}}

{{/* A PodDisruptionBudget keeping one replica of a component. */}}
{{- define "podtailor.pdb" -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: podtailor-{{ .component }}
  namespace: {{ include "podtailor.namespace" .root }}
  labels:
    {{- include "podtailor.labels" . | nindent 4 }}
spec:
  minAvailable: 1
  selector:
    matchLabels:
      {{- include "podtailor.selector" .component | nindent 6 }}
{{- end -}}

{{/* The Role and RoleBinding for a component's Lease (create any: create cannot be limited by name; read and renew only its own). */}}
{{- define "podtailor.leaderElectionRBAC" -}}
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: podtailor-{{ .component }}-leader-election
  namespace: {{ include "podtailor.namespace" .root }}
  labels:
    {{- include "podtailor.labels" . | nindent 4 }}
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [create]
  {{- if .anyLease }}
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get, list, update, patch, delete]
  {{- else }}
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    resourceNames: [{{ .leaseName }}]
    verbs: [get, update]
  {{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: podtailor-{{ .component }}-leader-election
  namespace: {{ include "podtailor.namespace" .root }}
  labels:
    {{- include "podtailor.labels" . | nindent 4 }}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: podtailor-{{ .component }}-leader-election}
subjects:
  - {kind: ServiceAccount, name: podtailor-{{ .component }}, namespace: {{ include "podtailor.namespace" .root }}}
{{- end -}}

{{/* ServiceAccount, ClusterRoleBinding of the ClusterRole of the same name. */}}
{{- define "podtailor.account" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: podtailor-{{ .component }}
  namespace: {{ include "podtailor.namespace" .root }}
  labels:
    {{- include "podtailor.labels" . | nindent 4 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: podtailor-{{ .component }}
  labels:
    {{- include "podtailor.labels" . | nindent 4 }}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: podtailor-{{ .component }}}
subjects:
  - {kind: ServiceAccount, name: podtailor-{{ .component }}, namespace: {{ include "podtailor.namespace" .root }}}
{{- end -}}

{{/* A component's metrics Service (recommender, updater) or HTTPS Service (webhook). */}}
{{- define "podtailor.service" -}}
apiVersion: v1
kind: Service
metadata:
  name: podtailor-{{ .component }}
  namespace: {{ include "podtailor.namespace" .root }}
  labels:
    {{- include "podtailor.labels" . | nindent 4 }}
spec:
  selector:
    {{- include "podtailor.selector" .component | nindent 4 }}
  ports:
    - {name: {{ .portName }}, port: {{ .port }}, targetPort: {{ .portName }}, protocol: TCP}
{{- end -}}
