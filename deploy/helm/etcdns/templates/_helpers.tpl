{{/*
Names are fixed, not derived from the release: they are the names of
deploy/'s kustomize tree, which certs.sh's certificates, the etcd member
names and the network policies use. One etcdns per namespace.
*/}}

{{/* The label every object and pod template carries (kustomize's labels:). */}}
{{- define "etcdns.partOf" -}}
app.kubernetes.io/part-of: etcdns
{{- end }}

{{/* image: repository:tag */}}
{{- define "etcdns.image" -}}
{{ .repository }}:{{ .tag }}
{{- end }}

{{/* The pod-spec fields every workload takes alike from its values. */}}
{{- define "etcdns.podPlacement" -}}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .dnsPolicy }}
dnsPolicy: {{ . }}
{{- end }}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .image.pullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- end }}

{{/* The container security context of every container (least privilege). */}}
{{- define "etcdns.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
{{- end }}

{{/* The pod security context: non-root 65532, seccomp (restricted profile). */}}
{{- define "etcdns.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  {{- if .fsGroup }}
  fsGroup: 65532
  {{- end }}
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{/*
Pod template annotations: the configuration's checksum, so that a changed
config rolls the pods (kustomize does that by the ConfigMap's hash suffix),
and the user's podAnnotations.
*/}}
{{- define "etcdns.podAnnotations" -}}
{{- $ann := dict "checksum/config" (.config | toYaml | sha256sum) -}}
{{- with .podAnnotations }}{{ $ann = merge $ann . }}{{ end -}}
annotations:
  {{- toYaml $ann | nindent 2 }}
{{- end }}

{{/* ETCDNS_ETCD_USERNAME/PASSWORD from the optional <program>-etcd-auth Secret; GOMAXPROCS when cores is set. */}}
{{- define "etcdns.env" -}}
env:
  - name: ETCDNS_ETCD_USERNAME
    valueFrom:
      secretKeyRef: {name: {{ .program }}-etcd-auth, key: username, optional: true}
  - name: ETCDNS_ETCD_PASSWORD
    valueFrom:
      secretKeyRef: {name: {{ .program }}-etcd-auth, key: password, optional: true}
  {{- with .cores }}
  - name: GOMAXPROCS
    value: {{ . | quote }}
  {{- end }}
  {{- with .extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* The image pull policy, when set (none: Kubernetes' default). */}}
{{- define "etcdns.pullPolicy" -}}
{{- with .pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/* Network policy rules: metrics from the monitoring namespace; out to the cluster's DNS. */}}
{{- define "etcdns.fromMonitoring" -}}
- from:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: monitoring
  ports:
    - {port: metrics, protocol: TCP}
{{- end }}
{{- define "etcdns.toClusterDNS" -}}
- to:
    - namespaceSelector:
        matchLabels:
          kubernetes.io/metadata.name: kube-system
      podSelector:
        matchLabels:
          k8s-app: kube-dns
  ports:
    - {port: 53, protocol: UDP}
    - {port: 53, protocol: TCP}
{{- end }}
