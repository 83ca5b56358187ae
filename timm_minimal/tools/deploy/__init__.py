"""Export for deployment: ONNX (fp32 and int8) with its checks against torch."""
