{{/* Name of every object: the release name unless fullnameOverride is set. */}}
{{- define "etcd-cluster.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of the headless Service that gives members their stable DNS names. */}}
{{- define "etcd-cluster.peerServiceName" -}}
{{- include "etcd-cluster.fullname" . -}}
{{- end -}}

{{/* Name of the client Service. */}}
{{- define "etcd-cluster.clientServiceName" -}}
{{- printf "%s-client" (include "etcd-cluster.fullname" .) -}}
{{- end -}}

{{- define "etcd-cluster.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "etcd-cluster.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the member pods. Never change them: a StatefulSet selector is immutable. */}}
{{- define "etcd-cluster.selectorLabels" -}}
app.kubernetes.io/name: etcd
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "etcd-cluster.labels" -}}
{{ include "etcd-cluster.selectorLabels" . }}
app.kubernetes.io/component: etcd
app.kubernetes.io/part-of: etcd-cluster
app.kubernetes.io/version: {{ .Values.etcd.version | quote }}
app.kubernetes.io/managed-by: {{ default .Release.Service .Values.managedBy | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
{{- range $k, $v := .Values.commonLabels }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end -}}

{{/* DNS suffix of the members: "<peer service>.<namespace>.svc[.<cluster domain>]". */}}
{{- define "etcd-cluster.dnsSuffix" -}}
{{- $s := printf "%s.%s.svc" (include "etcd-cluster.peerServiceName" .) .Release.Namespace -}}
{{- if .Values.etcd.clusterDomain -}}
{{- $s = printf "%s.%s" $s .Values.etcd.clusterDomain -}}
{{- end -}}
{{- $s -}}
{{- end -}}

{{/* --initial-cluster of the first formation: every ordinal's peer URL. */}}
{{- define "etcd-cluster.initialCluster" -}}
{{- $name := include "etcd-cluster.fullname" . -}}
{{- $suffix := include "etcd-cluster.dnsSuffix" . -}}
{{- $port := int .Values.etcd.peerPort -}}
{{- $members := list -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $members = append $members (printf "%s-%d=%s://%s-%d.%s:%d" $name $i (include "etcd-cluster.peerScheme" $) $name $i $suffix $port) -}}
{{- end -}}
{{- join "," $members -}}
{{- end -}}

{{/* Votes needed for quorum: floor(replicas / 2) + 1. */}}
{{- define "etcd-cluster.quorum" -}}
{{- add (div (int .Values.replicas) 2) 1 -}}
{{- end -}}

{{- define "etcd-cluster.image" -}}
{{- printf "%s:%s" .Values.image.repository (default (printf "v%s" .Values.etcd.version) .Values.image.tag) -}}
{{- end -}}

{{/*
Whether this etcd version serves /livez and /readyz (3.5.11 and later). Older versions get a
TCP liveness check and /health for readiness.
*/}}
{{- define "etcd-cluster.hasLivez" -}}
{{- if semverCompare ">=3.5.11-0" .Values.etcd.version -}}true{{- end -}}
{{- end -}}


{{/* URL scheme of the peer port: https when tls.peer.enabled. */}}
{{- define "etcd-cluster.peerScheme" -}}
{{- if and .Values.tls .Values.tls.peer .Values.tls.peer.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/*
Scheme of the peer transition listener ("" when there is none): the operator sets
tls.peer.transition while it moves the members' peer URLs between plain and TLS.
*/}}
{{- define "etcd-cluster.peerTransitionScheme" -}}
{{- if and .Values.tls .Values.tls.peer .Values.tls.peer.transition -}}{{ .Values.tls.peer.transition }}{{- end -}}
{{- end -}}

{{/* Port of the peer transition listener: etcd.peerTransitionPort, or the peer port + 2. */}}
{{- define "etcd-cluster.peerTransitionPort" -}}
{{- default (add (int .Values.etcd.peerPort) 2) .Values.etcd.peerTransitionPort -}}
{{- end -}}

{{/* Non-empty when a peer listener is https: the members then mount the peer certificate. */}}
{{- define "etcd-cluster.peerTLS" -}}
{{- if or (eq (include "etcd-cluster.peerScheme" .) "https") (eq (include "etcd-cluster.peerTransitionScheme" .) "https") -}}true{{- end -}}
{{- end -}}

{{/* URL scheme of the client port: https when tls.client.enabled. */}}
{{- define "etcd-cluster.clientScheme" -}}
{{- if and .Values.tls .Values.tls.client .Values.tls.client.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/*
The etcd-pilot operator's pods, as an entry of a NetworkPolicy's from list: the pods with
networkPolicy.operator.podLabels (all pods when empty) in networkPolicy.operator.namespace,
selected by the kubernetes.io/metadata.name label every namespace carries.
*/}}
{{- define "etcd-cluster.operatorPeer" -}}
{{- $op := .Values.networkPolicy.operator -}}
namespaceSelector:
  matchLabels:
    kubernetes.io/metadata.name: {{ $op.namespace | quote }}
podSelector:
  {{- with $op.podLabels }}
  matchLabels:
    {{- toYaml . | nindent 4 }}
  {{- else }} {}
  {{- end }}
{{- end -}}

{{/* Non-empty when the client port serves plain HTTP beside TLS (tls.client.acceptPlain). */}}
{{- define "etcd-cluster.clientAcceptsPlain" -}}
{{- if and (eq (include "etcd-cluster.clientScheme" .) "https") .Values.tls.client.acceptPlain -}}true{{- end -}}
{{- end -}}
