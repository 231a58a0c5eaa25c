{{/* The name prefix of every object. */}}
{{- define "tollgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "tollgate" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-tollgate" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of a component's objects; call with (list $ "gateway"). */}}
{{- define "tollgate.labels" -}}
{{- $ := index . 0 -}}
{{- $c := index . 1 -}}
app.kubernetes.io/name: {{ include "tollgate.fullname" $ }}-{{ $c }}
app.kubernetes.io/component: {{ $c }}
app.kubernetes.io/part-of: tollgate
{{- end -}}

{{/* The selector of a component's pods; call with (list $ "gateway"). */}}
{{- define "tollgate.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "tollgate.fullname" $ }}-{{ index . 1 }}
{{- end -}}

{{- define "tollgate.image" -}}
{{- .Values.image.repository }}{{ with .Values.image.tag }}:{{ . }}{{ end -}}
{{- end -}}

{{- define "tollgate.natsURL" -}}
{{- if .Values.nats.bundled.enabled -}}
nats://{{ include "tollgate.fullname" . }}-nats:4222
{{- else -}}
{{- .Values.nats.url -}}
{{- end -}}
{{- end -}}

{{- define "tollgate.configFile" -}}
{{- .Values.config.file | default (.Files.Get "files/tollgate.yaml") -}}
{{- end -}}

{{/* The environment every program gets: where NATS is, and the profiler. */}}
{{- define "tollgate.commonEnv" -}}
# The config's nats section reads these (${TOLLGATE_NATS_URL},
# ${TOLLGATE_NATS_REPLICAS}).
- name: TOLLGATE_NATS_URL
  value: {{ include "tollgate.natsURL" . | quote }}
- name: TOLLGATE_NATS_REPLICAS
  value: {{ .Values.nats.replicas | quote }}
# Continuous profiling is off unless this is set, e.g.
# http://pyroscope.observability.svc:4040.
- name: PYROSCOPE_SERVER_ADDRESS
  value: {{ .Values.pyroscopeServerAddress | quote }}
{{- end -}}

{{/* The pod and container security settings of every program. */}}
{{- define "tollgate.podSecurity" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "tollgate.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The bundled NATS servers' config file. */}}
{{- define "tollgate.natsConf" -}}
{{- $name := printf "%s-nats" (include "tollgate.fullname" .) -}}
{{- $n := .Values.nats.bundled -}}
port: 4222
http_port: 8222
server_name: $POD_NAME
jetstream {
  store_dir: "/data"
}
{{- if gt (int $n.replicas) 1 }}
cluster {
  name: {{ $name }}
  port: 6222
  routes: [
    {{- range $i := until (int $n.replicas) }}
    nats://{{ $name }}-{{ $i }}.{{ $name }}-headless:6222
    {{- end }}
  ]
}
{{- end }}
{{- end -}}
