{{/* Name of the namespaced objects: the release name unless fullnameOverride is set. */}}
{{- define "etcd-pilot.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of the cluster-scoped objects' names. In namespaced mode it holds the namespace, so
releases in different namespaces do not share them. */}}
{{- define "etcd-pilot.clusterName" -}}
{{- if .Values.namespaced -}}
{{- printf "%s-%s" (include "etcd-pilot.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- include "etcd-pilot.fullname" . -}}
{{- end -}}
{{- end -}}

{{- define "etcd-pilot.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "etcd-pilot.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the operator's pods. Never change them: a Deployment's selector is
immutable. The operator is told them (--operator-pod-labels) for clusters' NetworkPolicies. */}}
{{- define "etcd-pilot.selectorLabels" -}}
app.kubernetes.io/name: etcd-pilot
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "etcd-pilot.labels" -}}
{{ include "etcd-pilot.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- end -}}

{{/* The operator's image: repository:tag (tag default appVersion), or repository@digest. */}}
{{- define "etcd-pilot.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The rules of the role in a file copied from config/ by `make manifests`, as YAML. Called
with (list $ "files/rbac/FILE"). */}}
{{- define "etcd-pilot.rulesFrom" -}}
{{- $root := index . 0 -}}
{{- $file := index . 1 -}}
{{- $role := $root.Files.Get $file | fromYaml -}}
{{- if not $role.rules -}}
{{- fail (printf "%s holds no RBAC rules (%s): the chart is incomplete; `make manifests` copies them from config/" $file (default "empty" $role.Error)) -}}
{{- end -}}
{{- toYaml $role.rules -}}
{{- end -}}
