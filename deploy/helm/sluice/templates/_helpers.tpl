{{- define "sluice.name" -}}{{ .Release.Name }}-sluice{{- end -}}
{{- define "sluice.labels" -}}
app.kubernetes.io/name: sluice
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
{{- define "sluice.secretName" -}}{{ .Values.secret.existingSecret | default (printf "%s-secret" (include "sluice.name" .)) }}{{- end -}}
{{- define "sluice.keysName" -}}{{ .Values.apiKeys.existingSecret | default (printf "%s-api-keys" (include "sluice.name" .)) }}{{- end -}}
{{- define "sluice.prefillAddr" -}}{{ include "sluice.name" . }}-prefill.{{ .Release.Namespace }}.svc.cluster.local:{{ .Values.prefill.port }}{{- end -}}
{{- define "sluice.decodeAddr" -}}{{ include "sluice.name" . }}-decode.{{ .Release.Namespace }}.svc.cluster.local:{{ .Values.decode.port }}{{- end -}}
{{- define "sluice.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: {{ .Values.runAsUser }}
  runAsGroup: {{ .Values.runAsUser }}
  fsGroup: {{ .Values.runAsUser }}
{{- end -}}
{{- define "sluice.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
{{- end -}}
{{- define "sluice.secretEnv" -}}
env:
  - name: SLUICE_SECRET
    valueFrom:
      secretKeyRef:
        name: {{ include "sluice.secretName" . }}
        key: secret
{{- end -}}
{{- define "sluice.probes" -}}
livenessProbe:
  httpGet: {path: /health, port: admin}
  periodSeconds: 10
readinessProbe:
  httpGet: {path: /ready, port: admin}
  periodSeconds: 2
{{- end -}}
