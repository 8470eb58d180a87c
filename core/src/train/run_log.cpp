// placeholder: filled by the training-runtime work
