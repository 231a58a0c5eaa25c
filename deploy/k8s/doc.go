// Package k8s holds the Kubernetes manifests of Tollgate (a kustomize base:
// kubectl apply -k deploy/k8s) and the test that checks them. It has no Go
// API.
package k8s
