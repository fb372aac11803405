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
{{- include "etcd-cluster.labelsWith" (dict "ctx" . "extra" dict) -}}
{{- end -}}

{{/* Labels of the member pods: those of every object and podLabels. */}}
{{- define "etcd-cluster.podLabels" -}}
{{- include "etcd-cluster.labelsWith" (dict "ctx" . "extra" (.Values.podLabels | default dict)) -}}
{{- end -}}

{{/*
The chart's labels, then global.commonLabels, commonLabels and .extra over them, as YAML. The
selector labels and app.kubernetes.io/managed-by are always the chart's: a StatefulSet's
selector cannot change, and the operator finds the objects it applied by managed-by.
*/}}
{{- define "etcd-cluster.labelsWith" -}}
{{- $ := .ctx -}}
{{- $g := $.Values.global | default dict -}}
{{- $l := dict
  "app.kubernetes.io/component" "etcd"
  "app.kubernetes.io/part-of" "etcd-cluster"
  "app.kubernetes.io/version" ($.Values.etcd.version | toString)
  "helm.sh/chart" (printf "%s-%s" $.Chart.Name $.Chart.Version) -}}
{{- $l = mergeOverwrite $l ($g.commonLabels | default dict) ($.Values.commonLabels | default dict) .extra -}}
{{- $l = mergeOverwrite $l (include "etcd-cluster.selectorLabels" $ | fromYaml) -}}
{{- $_ := set $l "app.kubernetes.io/managed-by" (default $.Release.Service $.Values.managedBy) -}}
{{- toYaml $l -}}
{{- end -}}

{{/*
Annotations of an object: global.commonAnnotations, commonAnnotations and .extra (the object's
own, such as service.annotations) over them, as YAML; empty when there are none. Call with
(dict "ctx" $ "extra" MAP).
*/}}
{{- define "etcd-cluster.annotations" -}}
{{- $g := .ctx.Values.global | default dict -}}
{{- $a := mergeOverwrite (dict) ($g.commonAnnotations | default dict) (.ctx.Values.commonAnnotations | default dict) (.extra | default dict) -}}
{{- with $a }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* metadata.labels and metadata.annotations of an object, indented by 2. */}}
{{- define "etcd-cluster.metadata" -}}
labels:
  {{- include "etcd-cluster.labels" .ctx | nindent 2 }}
{{- with include "etcd-cluster.annotations" . }}
annotations:
  {{- . | nindent 2 }}
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

{{/*
The etcd image. global.imageRegistry (a parent chart's mirror) replaces the registry host of
image.repository (its first part, when that has a dot or a port or is localhost) or prefixes a
repository without one.
*/}}
{{- define "etcd-cluster.image" -}}
{{- $repo := .Values.image.repository -}}
{{- $registry := (.Values.global | default dict).imageRegistry | default "" | trimSuffix "/" -}}
{{- if $registry -}}
{{- $parts := splitList "/" $repo -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $repo = join "/" (rest $parts) -}}
{{- end -}}
{{- $repo = printf "%s/%s" $registry $repo -}}
{{- end -}}
{{- printf "%s:%s" $repo (default (printf "v%s" .Values.etcd.version) .Values.image.tag) -}}
{{- end -}}

{{/*
imagePullSecrets of the member pods: global.imagePullSecrets, then imagePullSecrets, each a
Secret's name or {name: NAME}, without repeats; empty when there are none.
*/}}
{{- define "etcd-cluster.imagePullSecrets" -}}
{{- $names := list -}}
{{- range concat ((.Values.global | default dict).imagePullSecrets | default list) (.Values.imagePullSecrets | default list) -}}
{{- $n := kindIs "string" . | ternary . (get (kindIs "map" . | ternary . dict) "name") -}}
{{- if and $n (not (has $n $names)) -}}
{{- $names = append $names $n -}}
{{- end -}}
{{- end -}}
{{- $out := list -}}
{{- range $names -}}
{{- $out = append $out (dict "name" .) -}}
{{- end -}}
{{- with $out }}{{ toYaml . }}{{ end -}}
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

{{/*
securityContext of the member pods: the restricted Pod Security profile's settings, with
podSecurityContext merged over them (values.schema.json refuses what the profile forbids).
*/}}
{{- define "etcd-cluster.podSecurityContext" -}}
{{- $sc := dict "runAsNonRoot" true "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- toYaml (mergeOverwrite $sc (deepCopy (.Values.podSecurityContext | default dict))) -}}
{{- end -}}

{{/*
securityContext of the etcd container: the restricted Pod Security profile's settings and a
read-only root filesystem, with containerSecurityContext merged over them key by key (lists
such as capabilities.add replace; values.schema.json keeps drop: [ALL] and refuses what the
profile forbids).
*/}}
{{- define "etcd-cluster.containerSecurityContext" -}}
{{- $sc := dict
  "allowPrivilegeEscalation" false
  "readOnlyRootFilesystem" true
  "runAsNonRoot" true
  "capabilities" (dict "drop" (list "ALL"))
  "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- toYaml (mergeOverwrite $sc (deepCopy (.Values.containerSecurityContext | default dict))) -}}
{{- end -}}
