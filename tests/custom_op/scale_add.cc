/* A tiny TensorFlow custom op written against TensorFlow's C kernel API
 * (tensorflow/c/kernels.h, tensorflow/c/ops.h), so it builds with the C API
 * headers alone, no TensorFlow C++ headers:
 *   TfserveScaleAdd(x: float) -> y: float, y = 3 * x + 1, elementwise.
 * ops.h declares its handle types as C++ structs, hence a C++ compiler:
 *   c++ -shared -fPIC scale_add.cc -I<include> -L<lib> -ltensorflow_framework -o scale_add.so */
#include <stdint.h>

#include "tensorflow/c/kernels.h"
#include "tensorflow/c/ops.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"

static void *create_kernel(TF_OpKernelConstruction *ctx) { (void)ctx; return nullptr; }

static void delete_kernel(void *kernel) { (void)kernel; }

static void compute(void *kernel, TF_OpKernelContext *ctx) {
  (void)kernel;
  TF_Status *status = TF_NewStatus();
  TF_Tensor *input = nullptr;
  TF_GetInput(ctx, 0, &input, status);
  if (TF_GetCode(status) == TF_OK) {
    int rank = TF_NumDims(input);
    int64_t dims[16];
    for (int i = 0; i < rank && i < 16; i++) dims[i] = TF_Dim(input, i);
    TF_Tensor *output = TF_AllocateOutput(ctx, 0, TF_FLOAT, dims, rank, TF_TensorByteSize(input), status);
    if (TF_GetCode(status) == TF_OK) {
      const float *x = (const float *)TF_TensorData(input);
      float *y = (float *)TF_TensorData(output);
      int64_t n = TF_TensorElementCount(input);
      for (int64_t i = 0; i < n; i++) y[i] = 3.0f * x[i] + 1.0f;
      TF_DeleteTensor(output);
    }
    TF_DeleteTensor(input);
  }
  if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
  TF_DeleteStatus(status);
}

static void same_shape(TF_ShapeInferenceContext *ctx, TF_Status *status) {
  TF_ShapeHandle *shape = TF_NewShapeHandle();
  TF_ShapeInferenceContextGetInput(ctx, 0, shape, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSetOutput(ctx, 0, shape, status);
  TF_DeleteShapeHandle(shape);
}

/* Runs when TF_LoadLibrary opens the library. */
__attribute__((constructor)) static void register_scale_add(void) {
  TF_Status *status = TF_NewStatus();
  TF_OpDefinitionBuilder *op = TF_NewOpDefinitionBuilder("TfserveScaleAdd");
  TF_OpDefinitionBuilderAddInput(op, "x: float");
  TF_OpDefinitionBuilderAddOutput(op, "y: float");
  TF_OpDefinitionBuilderSetShapeInferenceFunction(op, &same_shape);
  TF_RegisterOpDefinition(op, status);
  if (TF_GetCode(status) == TF_OK) {
    TF_KernelBuilder *kernel = TF_NewKernelBuilder("TfserveScaleAdd", "CPU", &create_kernel, &compute, &delete_kernel);
    TF_RegisterKernelBuilder("TfserveScaleAddOp", kernel, status);
  }
  TF_DeleteStatus(status);
}
