// Package errs is the one error type of Nubes: an upstream error code, a
// message safe to show a client, and the HTTP status derived from the code.
//
// Handlers return *errs.Error for every client-visible failure; anything else
// is treated as a bug (500) and its text is never sent to the client.
package errs

import (
	"errors"
	"fmt"
	"net/http"
)

// Codes of the upstream platform (spec/semantics.md section 3) used by Nubes.
const (
	InvalidArgument      = "ERROR_INVALID_ARGUMENT"
	RequiredParameter    = "ERROR_REQUIRED_PARAMETER"
	InvalidParameterType = "ERROR_INVALID_PARAMETER_TYPE"
	InvalidParameter     = "ERROR_INVALID_PARAMETER"
	JSONFormat           = "ERROR_JSON_FORMAT"
	OperatorValueType    = "ERROR_OPERATOR_VALUE_TYPE"
	OperatorListType     = "ERROR_OPERATOR_LIST_VALUE_TYPE"
	OperatorDictType     = "ERROR_OPERATOR_DICT_VALUE_TYPE"
	OperatorBooleanType  = "ERROR_OPERATOR_BOOLEAN_TYPE"
	DBQuery              = "ERROR_DB_QUERY"
	ExistResource        = "ERROR_EXIST_RESOURCE"
	NotFoundCode         = "ERROR_NOT_FOUND"
	NotUnique            = "ERROR_NOT_UNIQUE"
	SaveUniqueValues     = "ERROR_SAVE_UNIQUE_VALUES"
	AuthenticateFailure  = "ERROR_AUTHENTICATE_FAILURE"
	PermissionDenied     = "ERROR_PERMISSION_DENIED"
	RequestTooLarge      = "ERROR_REQUEST_TOO_LARGE"
	TooManyRequests      = "ERROR_TOO_MANY_REQUESTS"
	NotImplemented       = "ERROR_NOT_IMPLEMENTED"
	Unavailable          = "ERROR_UNAVAILAVBLE" // sic: the upstream spelling
	UnsupportedAPI       = "ERROR_UNSUPPORTED_API"
	Unknown              = "ERROR_UNKNOWN"
	InvalidCategory      = "ERROR_INVALID_CATEGORY"
	InvalidKeyInOptions  = "ERROR_INVALID_KEY_IN_OPTIONS"

	// repository
	InvalidSchema       = "ERROR_INVALID_SCHEMA"
	RegistryUnavailable = "ERROR_REGISTRY_UNAVAILABLE"
	RemoteRepository    = "ERROR_NOT_ALLOWED_IN_REMOTE_REPOSITORY"
	NoImageInRegistry   = "ERROR_NO_IMAGE_IN_REGISTRY"

	// dashboard
	LatestVersion = "ERROR_LATEST_VERSION"

	// notification
	WrongPluginSettings          = "ERROR_WRONG_PLUGIN_SETTINGS"            // upstream 500: the repository plugin lacks capability.supported_schema
	NotAllowedUpdateProtocolType = "ERROR_NOT_ALLOWED_UPDATE_PROTOCOL_TYPE" // upstream 500: the built-in INTERNAL protocol is read-only
	ProtocolDisabled             = "ERROR_PROTOCOL_DISABLED"                // a channel needs an ENABLED protocol

	// monitoring
	InvalidEscalationPolicyScope            = "ERROR_INVALID_ESCALATION_POLICY_SCOPE"
	DefaultEscalationPolicyNotAllowDeletion = "ERROR_DEFAULT_ESCALATION_POLICY_NOT_ALLOW_DELETION"
	WebhookStateDisabled                    = "ERROR_WEBHOOK_STATE_DISABLED"
	RequestTimeout                          = "ERROR_REQUEST_TIMEOUT"            // the body did not arrive in time
	WebhookPluginUnavailable                = "ERROR_WEBHOOK_PLUGIN_UNAVAILABLE" // kept for retry
	WebhookPluginTimeout                    = "ERROR_WEBHOOK_PLUGIN_TIMEOUT"     // kept for retry
	AlertInvalidState                       = "ERROR_ALERT_INVALID_STATE"        // Nubes' code: an ERROR alert changes no more
	InvalidEscalationPolicy                 = "ERROR_INVALID_ESCALATION_POLICY"  // a project alert config names another project's policy

	// cost-analysis
	UnsupportedCurrency           = "ERROR_UNSUPPORTED_CURRENCY"
	NotAllowedToChangeOrder       = "ERROR_NOT_ALLOWED_TO_CHANGE_ORDER"
	NotAllowedToChangeManagedRule = "ERROR_NOT_ALLOWED_TO_CHANGE_MANAGED_RULE"
	JobState                      = "ERROR_JOB_STATE"         // upstream 500: only a running job can be cancelled
	DuplicateJob                  = "ERROR_DUPLICATE_JOB"     // a job of the data source is running
	DataSourceState               = "ERROR_DATA_SOURCE_STATE" // a disabled data source does not sync

	// identity
	AuthenticationFailure    = "ERROR_AUTHENTICATION_FAILURE"
	InvalidCredentials       = "ERROR_INVALID_CREDENTIALS"
	LoginBlocked             = "ERROR_LOGIN_BLOCKED"
	UserStateDisabled        = "ERROR_USER_STATE_DISABLED"
	DomainState              = "ERROR_DOMAIN_STATE"
	IncorrectPasswordFormat  = "ERROR_INCORRECT_PASSWORD_FORMAT"
	PasswordNotChanged       = "ERROR_PASSWORD_NOT_CHANGED"
	PasswordNotMatched       = "ERROR_PASSWORD_NOT_MATCHED"
	InvalidVerifyCode        = "ERROR_INVALID_VERIFY_CODE"
	VerificationUnavailable  = "ERROR_VERIFICATION_UNAVAILABLE"
	LastAdmin                = "ERROR_LAST_ADMIN_CANNOT_DISABLED_DELETED"
	MFARequired              = "ERROR_MFA_REQUIRED"
	MFANotActivated          = "ERROR_MFA_NOT_ACTIVATED"
	MFAAlreadyEnabled        = "ERROR_MFA_ALREADY_ENABLED"
	MFAAlreadyDisabled       = "ERROR_MFA_ALREADY_DISABLED"
	InvalidGrantType         = "ERROR_INVALID_GRANT_TYPE"
	UpdatePasswordRequired   = "ERROR_UPDATE_PASSWORD_REQUIRED"
	APIKeyExpiredLimit       = "ERROR_API_KEY_EXPIRED_LIMIT"
	NotAllowedToChangeDomain = "ERROR_NOT_ALLOWED_TO_CHANGE_DOMAIN"

	// cloud accounts (identity provider, schema, service account; secret)
	SchemaNotDefined   = "ERROR_SCHEMA_IS_NOT_DEFINED"                // the provider has no schema of the type
	SchemaIDNotDefined = "ERROR_SCHEMA_ID_IS_NOT_DEFINED"             // no schema of that id and type
	ManagedAccount     = "ERROR_MANAGED_RESOURCE_CAN_NOT_BE_MODIFIED" // upstream 500: a synced account while its sync is on
	ExistRelatedSecret = "ERROR_EXIST_RELATED_SECRET"                 // a secret still refers to the trusted secret

	// plugins (pkg/plugin; docs/decisions.md "Plugins")
	PluginFailed     = "ERROR_PLUGIN"             // the plugin answered an error; status per its gRPC status
	GRPCConnection   = "ERROR_GRPC_CONNECTION"    // the plugin cannot be reached
	GRPCTimeout      = "ERROR_GRPC_TIMEOUT"       // the plugin did not answer in time
	NoPluginEndpoint = "ERROR_NO_PLUGIN_ENDPOINT" // no endpoint configured for the plugin
)

// statusOf is the one table from error code to HTTP status. Codes that
// upstream answers with 500 although the client is at fault (ERROR_DB_QUERY
// for a bad filter, ERROR_INVALID_CATEGORY, ...) are 400 here on purpose.
// A code missing from the table is a bug and answers 500.
var statusOf = map[string]int{
	InvalidArgument:      http.StatusBadRequest,
	RequiredParameter:    http.StatusBadRequest,
	InvalidParameterType: http.StatusBadRequest,
	InvalidParameter:     http.StatusBadRequest,
	JSONFormat:           http.StatusBadRequest,
	OperatorValueType:    http.StatusBadRequest,
	OperatorListType:     http.StatusBadRequest,
	OperatorDictType:     http.StatusBadRequest,
	OperatorBooleanType:  http.StatusBadRequest,
	DBQuery:              http.StatusBadRequest,
	ExistResource:        http.StatusBadRequest,
	InvalidCategory:      http.StatusBadRequest,
	InvalidKeyInOptions:  http.StatusBadRequest,
	InvalidSchema:        http.StatusBadRequest,
	RegistryUnavailable:  http.StatusServiceUnavailable, // the image registry failed or is unreachable
	RemoteRepository:     http.StatusForbidden,
	NoImageInRegistry:    http.StatusNotFound, // upstream 500
	LatestVersion:        http.StatusBadRequest,

	WrongPluginSettings:          http.StatusBadRequest,
	NotAllowedUpdateProtocolType: http.StatusBadRequest,
	ProtocolDisabled:             http.StatusBadRequest,

	InvalidEscalationPolicyScope:            http.StatusBadRequest,
	DefaultEscalationPolicyNotAllowDeletion: http.StatusBadRequest,
	WebhookStateDisabled:                    http.StatusForbidden,
	RequestTimeout:                          http.StatusRequestTimeout,
	WebhookPluginUnavailable:                http.StatusBadGateway,
	WebhookPluginTimeout:                    http.StatusGatewayTimeout,
	AlertInvalidState:                       http.StatusConflict,
	InvalidEscalationPolicy:                 http.StatusBadRequest,

	UnsupportedCurrency:           http.StatusBadRequest,
	NotAllowedToChangeOrder:       http.StatusBadRequest,
	NotAllowedToChangeManagedRule: http.StatusBadRequest,
	JobState:                      http.StatusConflict,
	DuplicateJob:                  http.StatusConflict,
	DataSourceState:               http.StatusConflict,

	AuthenticationFailure:    http.StatusUnauthorized,
	InvalidCredentials:       http.StatusUnauthorized,
	LoginBlocked:             http.StatusUnauthorized,
	MFARequired:              http.StatusUnauthorized, // upstream 500
	UserStateDisabled:        http.StatusBadRequest,
	DomainState:              http.StatusBadRequest,
	IncorrectPasswordFormat:  http.StatusBadRequest,
	PasswordNotChanged:       http.StatusBadRequest,
	PasswordNotMatched:       http.StatusBadRequest,
	InvalidVerifyCode:        http.StatusBadRequest,
	VerificationUnavailable:  http.StatusBadRequest,
	LastAdmin:                http.StatusBadRequest,
	MFANotActivated:          http.StatusBadRequest, // upstream 500
	MFAAlreadyEnabled:        http.StatusConflict,   // upstream 500: a state conflict
	MFAAlreadyDisabled:       http.StatusConflict,
	InvalidGrantType:         http.StatusBadRequest,
	UpdatePasswordRequired:   http.StatusBadRequest,
	APIKeyExpiredLimit:       http.StatusBadRequest,
	NotAllowedToChangeDomain: http.StatusBadRequest,
	SchemaNotDefined:         http.StatusBadRequest,
	SchemaIDNotDefined:       http.StatusBadRequest,
	ManagedAccount:           http.StatusBadRequest,
	ExistRelatedSecret:       http.StatusConflict,
	NotFoundCode:             http.StatusNotFound,
	NotUnique:                http.StatusConflict,
	SaveUniqueValues:         http.StatusConflict,
	AuthenticateFailure:      http.StatusUnauthorized,
	PermissionDenied:         http.StatusForbidden,
	RequestTooLarge:          http.StatusRequestEntityTooLarge,
	TooManyRequests:          http.StatusTooManyRequests,
	NotImplemented:           http.StatusNotImplemented,
	UnsupportedAPI:           http.StatusNotFound,
	Unavailable:              http.StatusServiceUnavailable,
	Unknown:                  http.StatusInternalServerError,

	PluginFailed:     http.StatusBadGateway, // plugin.Failure sets 400 or 503 where the plugin's status says so
	GRPCConnection:   http.StatusServiceUnavailable,
	GRPCTimeout:      http.StatusServiceUnavailable,
	NoPluginEndpoint: http.StatusServiceUnavailable,
}

// Error is a client-visible failure.
type Error struct {
	Code    string
	Message string
	Cause   error // logged by the server, never sent to the client
	// status, when set, is the HTTP status another service of the suite
	// answered with: its code passes through even when not in statusOf.
	status int
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Code + ": " + e.Message + ": " + e.Cause.Error()
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Cause }

// Status is the HTTP status of the error's code.
func (e *Error) Status() int {
	if e.status != 0 {
		return e.status
	}
	if s, ok := statusOf[e.Code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// New builds an error with a formatted message.
func New(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// As returns the *Error inside err, if any.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// Is reports whether err is, or wraps, an *Error with code.
func Is(err error, code string) bool {
	e, ok := As(err)
	return ok && e.Code == code
}

// Passthrough is the error another service of the suite answered, kept
// with its own status and code.
func Passthrough(status int, code, message string) *Error {
	return &Error{Code: code, Message: message, status: status}
}

// Required reports a missing required parameter.
func Required(key string) *Error {
	return New(RequiredParameter, "Required parameter. (key = %s)", key)
}

// Invalid reports a parameter with a bad value.
func Invalid(key, reason string) *Error {
	return New(InvalidParameter, "Invalid parameter. (key = %s, reason = %s)", key, reason)
}

// InvalidType reports a parameter of the wrong JSON type.
func InvalidType(key, want string) *Error {
	return New(InvalidParameterType, "Invalid parameter type. (key = %s, type = %s)", key, want)
}

// NotFound reports a missing resource, or one of another tenant.
func NotFound(key, value string) *Error {
	return New(NotFoundCode, "Resource cannot be found or access is denied. (%s = %s)", key, value)
}

// Unauthenticated reports missing or bad credentials.
func Unauthenticated(reason string) *Error {
	return New(AuthenticateFailure, "Authenticate failure. (message = %s)", reason)
}

// Forbidden reports an authenticated caller without the permission.
func Forbidden() *Error { return New(PermissionDenied, "Permission denied.") }

// Duplicate reports a unique key already taken.
func Duplicate(key, value string) *Error {
	return New(NotUnique, "Value is not unique. (%s = %s)", key, value)
}

// Down reports an unavailable dependency; the cause is logged, not sent.
func Down(what string, cause error) *Error {
	e := New(Unavailable, "%s is unavailable, retry later.", what)
	e.Cause = cause
	return e
}
