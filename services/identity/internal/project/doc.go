// Package project serves projects (/identity/v2/project/), inside a
// workspace. A workspace member reaches only its projects (core's
// MemberProjects rule); nothing here reaches another domain's.
package project
