{{/* Names. The fullname is "<release>-sluice" unless the release name already holds "sluice". */}}
{{- define "sluice.fullname" -}}
{{- if contains "sluice" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-sluice" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* Labels of every object; selectorLabels (the pod selector of a role) is the subset that never changes. Call with (dict "root" $ "role" "router"). */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{- define "sluice.labels" -}}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "sluice.secretName" -}}
{{- .Values.secret.existingSecret | default (printf "%s-handoff" (include "sluice.fullname" .)) -}}
{{- end -}}

{{- define "sluice.apiKeysEnabled" -}}
{{- if or .Values.apiKeys.existingSecret .Values.apiKeys.keys -}}true{{- end -}}
{{- end -}}

{{- define "sluice.apiKeysName" -}}
{{- .Values.apiKeys.existingSecret | default (printf "%s-api-keys" (include "sluice.fullname" .)) -}}
{{- end -}}

{{/* The headless Service of a worker role, and its fully qualified address (host:port) that peers dial. Call with (dict "root" $ "role" "decode"). */}}
{{- define "sluice.workerService" -}}
{{- printf "%s-%s" (include "sluice.fullname" .root) .role -}}
{{- end -}}

{{- define "sluice.workerAddr" -}}
{{- $port := (index .root.Values .role).port -}}
{{- printf "%s.%s.svc.%s:%v" (include "sluice.workerService" .) .root.Release.Namespace .root.Values.clusterDomain $port -}}
{{- end -}}

{{/* Paths inside every container. */}}
{{- define "sluice.secretFile" -}}/run/sluice/secret/handoff{{- end -}}
{{- define "sluice.apiKeysFile" -}}/etc/sluice/api-keys/api-keys{{- end -}}

{{/* Flags every role shares: model, context, logs, secret. */}}
{{- define "sluice.commonArgs" -}}
{{- $v := .Values -}}
{{- if $v.model.file }}
- --model={{ printf "%s/%s" $v.model.mountPath $v.model.file }}
{{- end }}
- --context={{ $v.model.context }}
- --log-format={{ $v.log.format }}
- --log-level={{ $v.log.level }}
- --secret-file={{ include "sluice.secretFile" . }}
{{- end -}}

{{/* Flags of the KV pool of a worker role (call with the role's values). */}}
{{- define "sluice.poolArgs" -}}
{{- if .kvPoolTokens }}
- --kv-pool-tokens={{ .kvPoolTokens }}
{{- else }}
- --kv-memory={{ .kvMemory }}
{{- end }}
{{- if .pageSize }}
- --page-size={{ .pageSize }}
{{- end }}
{{- if .threads }}
- --threads={{ .threads }}
{{- end }}
{{- end -}}

{{/* Probes on a role's admin port (call with (dict "root" $ "port" N)). */}}
{{- define "sluice.probes" -}}
{{- $p := .root.Values.probes -}}
{{- $scheme := include "sluice.adminScheme" . -}}
startupProbe:
  httpGet: {path: /health, port: admin, scheme: {{ $scheme }}}
  periodSeconds: {{ $p.periodSeconds }}
  timeoutSeconds: {{ $p.timeoutSeconds }}
  failureThreshold: {{ $p.startupFailureThreshold }}
livenessProbe:
  httpGet: {path: /health, port: admin, scheme: {{ $scheme }}}
  periodSeconds: {{ $p.periodSeconds }}
  timeoutSeconds: {{ $p.timeoutSeconds }}
  failureThreshold: {{ $p.livenessFailureThreshold }}
readinessProbe:
  httpGet: {path: /ready, port: admin, scheme: {{ $scheme }}}
  periodSeconds: {{ $p.periodSeconds }}
  timeoutSeconds: {{ $p.timeoutSeconds }}
  failureThreshold: {{ $p.readinessFailureThreshold }}
{{- end -}}

{{/* HTTPS when the role serves TLS (the router with router.tls.secretName:
its admin listener shares the API's certificate), else HTTP. The kubelet
does not verify a probe's certificate. */}}
{{- define "sluice.adminScheme" -}}
{{- if and (eq .role "router") .root.Values.router.tls.secretName -}}HTTPS{{- else -}}HTTP{{- end -}}
{{- end -}}

{{/* Pod annotations of a role (call with (dict "root" $ "role" "decode")). */}}
{{- define "sluice.podAnnotations" -}}
{{- $r := index .root.Values .role -}}
{{- if .root.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ $r.adminPort | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- with $r.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The pod-level parts every role shares: security context, the init
container that puts the secret in place with mode 0600, the volumes.
Call with (dict "root" $ "role" "router"). */}}
{{- define "sluice.podCommon" -}}
{{- $v := .root.Values -}}
{{- $r := index $v .role -}}
securityContext:
  {{- toYaml $v.podSecurityContext | nindent 2 }}
terminationGracePeriodSeconds: {{ $r.terminationGracePeriodSeconds }}
automountServiceAccountToken: false
enableServiceLinks: false
{{- with $v.image.pullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- with $r.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $r.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $r.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
initContainers:
  - name: secret-file
    image: {{ $v.secretInit.image }}
    imagePullPolicy: {{ $v.secretInit.pullPolicy }}
    # The Secret volume's file is group-readable (fsGroup); sluice wants
    # it readable by its owner only (I12), so copy it with umask 077.
    command: ["sh", "-c", "umask 077 && cat /run/sluice/secret-src/handoff > {{ include "sluice.secretFile" .root }}"]
    securityContext:
      {{- toYaml $v.containerSecurityContext | nindent 6 }}
    resources:
      {{- toYaml $v.secretInit.resources | nindent 6 }}
    volumeMounts:
      - name: secret-src
        mountPath: /run/sluice/secret-src
        readOnly: true
      - name: secret
        mountPath: /run/sluice/secret
volumes:
  - name: secret-src
    secret:
      secretName: {{ include "sluice.secretName" .root }}
      defaultMode: 0400
      items:
        - key: {{ $v.secret.key }}
          path: handoff
  - name: secret
    emptyDir:
      medium: Memory
      sizeLimit: 1Mi
  {{- if $v.model.file }}
  - name: model
    {{- if eq $v.model.volume "pvc" }}
    persistentVolumeClaim:
      claimName: {{ $v.model.pvc.claimName }}
      readOnly: true
    {{- else if eq $v.model.volume "hostPath" }}
    hostPath:
      path: {{ $v.model.hostPath.path }}
      type: {{ $v.model.hostPath.type }}
    {{- else }}
    {{- fail (printf "model.volume %q: use pvc or hostPath" $v.model.volume) }}
    {{- end }}
  {{- end }}
  {{- if and (eq .role "router") $v.router.tls.secretName }}
  - name: tls
    secret:
      secretName: {{ $v.router.tls.secretName }}
      defaultMode: 0400
  {{- end }}
  {{- if and (eq .role "router") (include "sluice.apiKeysEnabled" .root) }}
  - name: api-keys
    secret:
      secretName: {{ include "sluice.apiKeysName" .root }}
      defaultMode: 0400
      items:
        - key: {{ $v.apiKeys.key }}
          path: api-keys
  {{- end }}
{{- end -}}

{{/* The volume mounts of a role's main container. */}}
{{- define "sluice.mounts" -}}
{{- $v := .root.Values -}}
volumeMounts:
  - name: secret
    mountPath: /run/sluice/secret
    readOnly: true
  {{- if $v.model.file }}
  - name: model
    mountPath: {{ $v.model.mountPath }}
    readOnly: true
  {{- end }}
  {{- if and (eq .role "router") (include "sluice.apiKeysEnabled" .root) }}
  - name: api-keys
    mountPath: /etc/sluice/api-keys
    readOnly: true
  {{- end }}
  {{- if and (eq .role "router") $v.router.tls.secretName }}
  - name: tls
    mountPath: /etc/sluice/tls
    readOnly: true
  {{- end }}
{{- end -}}

{{/* A role's PodDisruptionBudget (call with (dict "root" $ "role" "decode")). */}}
{{- define "sluice.pdb" -}}
{{- $r := index .root.Values .role -}}
{{- if $r.pdb }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "sluice.fullname" .root }}-{{ .role }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "sluice.labels" . | nindent 4 }}
spec:
  {{- toYaml $r.pdb | nindent 2 }}
  selector:
    matchLabels:
      {{- include "sluice.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end -}}
