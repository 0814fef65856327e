//! Model names, digests, the content-addressed blob store and manifests, the Modelfile, create,
//! pull and push. Knows nothing of inference: it moves and verifies bytes and names.
