# %% [markdown]
# # Mixed precision: custom training loop
# Exported from a Colab notebook (follows the TF 2.4 mixed precision guide).

# %%
import time

import numpy as np
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers, mixed_precision

print(tf.__version__)

# %%
mixed_precision.set_global_policy("mixed_float16")
print("Compute dtype:", mixed_precision.global_policy().compute_dtype)
print("Variable dtype:", mixed_precision.global_policy().variable_dtype)

# %%
inputs = keras.Input(shape=(784,), name="digits")
x = layers.Dense(512, activation="relu", name="dense_1")(inputs)
x = layers.Dense(512, activation="relu", name="dense_2")(x)
x = layers.Dense(10, name="dense_logits")(x)
outputs = layers.Activation("softmax", dtype="float32", name="predictions")(x)
model = keras.Model(inputs=inputs, outputs=outputs)

# %%
rng = np.random.default_rng(0)
x_train = rng.uniform(0, 255, size=(2048, 784)).astype("float32") / 255
y_train = rng.integers(0, 10, size=(2048,))
train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2048).batch(256)

# %%
optimizer = keras.optimizers.RMSprop()
optimizer = mixed_precision.LossScaleOptimizer(optimizer)
loss_object = keras.losses.SparseCategoricalCrossentropy()

# %%
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        predictions = model(x)
        loss = loss_object(y, predictions)
        scaled_loss = optimizer.get_scaled_loss(loss)
    scaled_gradients = tape.gradient(scaled_loss, model.trainable_variables)
    gradients = optimizer.get_unscaled_gradients(scaled_gradients)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss

# %%
for epoch in range(2):
    start = time.time()
    for x, y in train_dataset:
        loss = train_step(x, y)
    print(f"epoch {epoch}: loss {float(loss):.4f} ({time.time() - start:.1f}s)")
