{{/*
What each service of the suite talks to, read from its code: the
services it calls (service_urls; identity too, for token keys and
checks, is added for every service), whether it calls plugins, and its
NATS subjects. The NetworkPolicy and the NATS authorization are built
from this one table; a service that starts calling another, or uses a
new subject, changes it here (test/helm checks both renders).

NATS, per service (see pkg/events):
  publish:   subjects it publishes on (outbox relay or bus.Publish);
  consumers: "<stream>.<durable>" of the durable consumers it pulls from
             (pkg/events.Consume creates them with their filter subject);
  kv:        key-value buckets it uses;
  streams:   the Nubes streams it creates and updates: those it publishes
             into (pkg/events.OwnedStreams; TestChartNATSUsers checks the
             two agree). Every NATS user may read any stream's info (a
             consumer binds to another's stream), no more;
  deleteMsgs: streams it deletes single messages from (the mailer, each
             mail it sent, from a mail stream made before it was a work
             queue).
*/}}
{{- define "nubes.flows" -}}
identity:
  calls: ["*"]            # the console's reflection list merges every service's
  plugins: true           # account collectors (trusted-account sync)
  nats:
    # deleted: users, workspaces and projects it deleted, for every
    # service holding their records (pkg/events ConsumeDeletions).
    publish: [nubes.mail.send, nubes.job.identity, nubes.deleted]
    consumers: [{stream: NUBES_JOBS, durable: identity-sync, filter: nubes.job.identity}]
    streams: [NUBES_MAIL, NUBES_JOBS, NUBES_DELETED]
inventory:
  calls: [repository]
  plugins: true
  nats:
    publish: [nubes.inventory.task, nubes.notification.request]
    consumers: [{stream: NUBES_INVENTORY_TASKS, durable: inventory, filter: nubes.inventory.task}, {stream: NUBES_DELETED, durable: inventory-deleted, filter: nubes.deleted}]
    streams: [NUBES_NOTIFICATION, NUBES_INVENTORY_TASKS]
cost-analysis:
  calls: [repository]
  plugins: true
  nats:
    publish: [nubes.job.cost-analysis, nubes.notification.request]
    consumers: [{stream: NUBES_JOBS, durable: cost-analysis, filter: nubes.job.cost-analysis}, {stream: NUBES_DELETED, durable: cost-analysis-deleted, filter: nubes.deleted}]
    streams: [NUBES_JOBS, NUBES_NOTIFICATION]
monitoring:
  calls: [repository]
  plugins: true
  nats:
    publish: [nubes.monitoring.event, nubes.notification.request]
    consumers: [{stream: NUBES_DELETED, durable: monitoring-deleted, filter: nubes.deleted}]
    streams: [NUBES_MONITORING, NUBES_NOTIFICATION]
notification:
  calls: [repository]
  plugins: true
  nats:
    # dispatch: one per channel a request picked; mail.send: e-mail
    # channels of the built-in protocol go through the mailer.
    publish: [nubes.notification.dead, nubes.notification.dispatch, nubes.mail.send]
    consumers:
      - {stream: NUBES_NOTIFICATION, durable: notification, filter: nubes.notification.dispatch}
      - {stream: NUBES_NOTIFICATION, durable: notification-request, filter: nubes.notification.request}
      - {stream: NUBES_DELETED, durable: notification-deleted, filter: nubes.deleted}
    streams: [NUBES_MAIL, NUBES_NOTIFICATION, NUBES_NOTIFICATION_DEAD]
mailer:
  calls: []
  nats:
    publish: [nubes.mail.dead]
    consumers: [{stream: NUBES_MAIL, durable: mailer, filter: nubes.mail.send}]
    kv: [mail_sent]
    streams: [NUBES_MAIL_DEAD]
    deleteMsgs: [NUBES_MAIL]
secret:
  calls: [repository]
  nats:
    consumers: [{stream: NUBES_DELETED, durable: secret-deleted, filter: nubes.deleted}]
repository:
  calls: []
dashboard:
  calls: []
  nats:
    consumers: [{stream: NUBES_DELETED, durable: dashboard-deleted, filter: nubes.deleted}]
config:
  calls: []
  nats:
    consumers: [{stream: NUBES_DELETED, durable: config-deleted, filter: nubes.deleted}]
board:
  calls: []
{{- end -}}

{{/* The Nubes JetStream streams (pkg/events.StreamConfigs). */}}
{{- define "nubes.natsStreams" -}}
[NUBES_MAIL, NUBES_MAIL_DEAD, NUBES_JOBS, NUBES_MONITORING, NUBES_NOTIFICATION, NUBES_NOTIFICATION_DEAD, NUBES_INVENTORY_TASKS, NUBES_DELETED]
{{- end -}}

{{/* The flows of one service (an unknown one: identity only); call with (dict "root" $ "name" $name). */}}
{{- define "nubes.flowsOf" -}}
{{- $all := include "nubes.flows" .root | fromYaml -}}
{{- toYaml (get $all .name | default (dict "calls" list)) -}}
{{- end -}}

{{/* Whether a service connects to NATS. */}}
{{- define "nubes.usesNATS" -}}
{{- $f := include "nubes.flowsOf" . | fromYaml -}}
{{- if $f.nats }}true{{ end -}}
{{- end -}}

{{/* The NATS user of a service: nubes-<name>. */}}
{{- define "nubes.natsUser" -}}
nubes-{{ .name }}
{{- end -}}

{{/* The Secret key of a service's NATS password: nats-password-<name>. */}}
{{- define "nubes.natsPasswordKey" -}}
nats-password-{{ .name }}
{{- end -}}

{{/* The NATS server variable holding a service's password. */}}
{{- define "nubes.natsPasswordVar" -}}
NUBES_NATS_PASSWORD_{{ .name | upper | replace "-" "_" }}
{{- end -}}

{{/*
The NATS permissions of one service, as YAML {publish: [...], subscribe:
[...]}. Replies come to the service's own inbox prefix
(_INBOX.<user>., pkg/events.WithUser), so no user reads another's
replies, fetched messages included.
*/}}
{{- define "nubes.natsPermissions" -}}
{{- $f := include "nubes.flowsOf" . | fromYaml -}}
{{- $user := include "nubes.natsUser" . -}}
{{- $pub := list -}}
{{- range $s := include "nubes.natsStreams" .root | fromYamlArray -}}
{{- $pub = append $pub (printf "$JS.API.STREAM.INFO.%s" $s) -}}
{{- end -}}
{{- range $s := $f.nats.streams -}}
{{- $pub = concat $pub (list (printf "$JS.API.STREAM.CREATE.%s" $s) (printf "$JS.API.STREAM.UPDATE.%s" $s)) -}}
{{- end -}}
{{- range $s := $f.nats.deleteMsgs -}}
{{- $pub = append $pub (printf "$JS.API.STREAM.MSG.DELETE.%s" $s) -}}
{{- end -}}
{{- range $f.nats.publish -}}
{{- $pub = append $pub . -}}
{{- end -}}
{{- range $c := $f.nats.consumers -}}
{{- $pub = concat $pub (list
      (printf "$JS.API.CONSUMER.CREATE.%s.%s.%s" $c.stream $c.durable $c.filter)
      (printf "$JS.API.CONSUMER.INFO.%s.%s" $c.stream $c.durable)
      (printf "$JS.API.CONSUMER.MSG.NEXT.%s.%s" $c.stream $c.durable)
      (printf "$JS.ACK.%s.%s.>" $c.stream $c.durable)) -}}
{{- end -}}
{{- if $f.nats.kv -}}
{{- /* Creating a bucket reads the account's JetStream info first. */ -}}
{{- $pub = append $pub "$JS.API.INFO" -}}
{{- end -}}
{{- range $b := $f.nats.kv -}}
{{- $pub = concat $pub (list
      (printf "$JS.API.STREAM.CREATE.KV_%s" $b) (printf "$JS.API.STREAM.UPDATE.KV_%s" $b) (printf "$JS.API.STREAM.INFO.KV_%s" $b)
      (printf "$JS.API.DIRECT.GET.KV_%s.>" $b) (printf "$JS.API.STREAM.MSG.GET.KV_%s" $b)
      (printf "$KV.%s.>" $b)) -}}
{{- end -}}
{{- toYaml (dict "publish" $pub "subscribe" (list (printf "_INBOX.%s.>" $user))) -}}
{{- end -}}
