// Package docker holds the container build of Tollgate (Dockerfile: one
// static image with every program) and the config baked into it
// (tollgate.yaml), used by the repository's docker-compose.yml. Its test
// checks that the compose file parses and is consistent with the
// repository; Docker itself is not run.
package docker
