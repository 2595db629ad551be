module github.com/nubes-io/nubes/deploy/devstack

go 1.26.8

require (
	github.com/nubes-io/nubes/pkg v0.0.0
	github.com/nubes-io/nubes/services/board v0.0.0
	github.com/nubes-io/nubes/services/config v0.0.0
	github.com/nubes-io/nubes/services/cost-analysis v0.0.0
	github.com/nubes-io/nubes/services/dashboard v0.0.0
	github.com/nubes-io/nubes/services/identity v0.0.0
	github.com/nubes-io/nubes/services/inventory v0.0.0
	github.com/nubes-io/nubes/services/mailer v0.0.0
	github.com/nubes-io/nubes/services/monitoring v0.0.0
	github.com/nubes-io/nubes/services/notification v0.0.0
	github.com/nubes-io/nubes/services/repository v0.0.0
	github.com/nubes-io/nubes/services/secret v0.0.0
)

replace (
	github.com/nubes-io/nubes/pkg => ../../pkg
	github.com/nubes-io/nubes/services/board => ../../services/board
	github.com/nubes-io/nubes/services/config => ../../services/config
	github.com/nubes-io/nubes/services/cost-analysis => ../../services/cost-analysis
	github.com/nubes-io/nubes/services/dashboard => ../../services/dashboard
	github.com/nubes-io/nubes/services/identity => ../../services/identity
	github.com/nubes-io/nubes/services/inventory => ../../services/inventory
	github.com/nubes-io/nubes/services/mailer => ../../services/mailer
	github.com/nubes-io/nubes/services/monitoring => ../../services/monitoring
	github.com/nubes-io/nubes/services/notification => ../../services/notification
	github.com/nubes-io/nubes/services/repository => ../../services/repository
	github.com/nubes-io/nubes/services/secret => ../../services/secret
)
