"""Keras 3 trainer object: the optimizer comes from a dataclass config's factory method."""
import dataclasses

import numpy as np
import tensorflow as tf
import keras


@dataclasses.dataclass
class TrainConfig:
    learning_rate: float = 0.05
    momentum: float = 0.9
    mixed_precision: bool = True

    def make_optimizer(self):
        opt = keras.optimizers.SGD(self.learning_rate, momentum=self.momentum)
        if self.mixed_precision:
            opt = keras.optimizers.LossScaleOptimizer(opt)
        return opt


class Trainer:
    def __init__(self, model, config):
        self.model = model
        self.optimizer = config.make_optimizer()
        self.loss_fn = keras.losses.MeanSquaredError()

    @tf.function
    def step(self, x, y):
        with tf.GradientTape() as tape:
            pred = self.model(x, training=True)
            loss = self.loss_fn(y, pred)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


def main():
    config = TrainConfig()
    if config.mixed_precision:
        keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([
        keras.Input((16,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(1, dtype="float32"),
    ])
    trainer = Trainer(model, config)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(512, 16)).astype("float32")
    y = (x[:, :4].sum(axis=1, keepdims=True) * 0.5).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512).batch(64)
    for epoch in range(4):
        losses = [float(trainer.step(bx, by)) for bx, by in ds]
        print(f"epoch {epoch} loss {np.mean(losses):.4f}")


if __name__ == "__main__":
    main()
