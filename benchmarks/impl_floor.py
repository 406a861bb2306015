"""The compute floor: a plain PyTorch loop doing W's SGD steps, one client after another, one thread.

nn.Module + torch.optim.SGD; the data as tensors, minibatches by index (a fresh permutation per
client and round, as DataLoader(shuffle=True) would draw); the server keeps the global state_dict
and averages the clients' state_dicts weighted by size. Usage: python impl_floor.py mlp|cnn [rounds]
[cpu|cuda]; on a GPU the model, the data and the minibatch indices live there (permutations are
drawn on the CPU, as on a CPU run).
"""
import sys
import time

import torch
import torch.nn.functional as F

import workload as W


def main(model_name: str, rounds: int, device_name: str = "cpu") -> None:
    torch.set_num_threads(1)
    device = torch.device(device_name)
    train_x, train_y, test_x, test_y = (t.to(device) for t in W.load_fmnist())
    parts = [torch.from_numpy(p) for p in W.iid_partition()]
    model = W.make_model(model_name).to(device)
    global_state = {k: v.clone() for k, v in model.state_dict().items()}
    generator = torch.Generator().manual_seed(W.SEED)
    warm_up_started, warm_up_cpu_started = time.perf_counter(), time.process_time()
    W.warm_up_torch()
    warm_up, warm_up_cpu = time.perf_counter() - warm_up_started, time.process_time() - warm_up_cpu_started
    startup, startup_cpu = W.startup_seconds(), W.startup_cpu_seconds()
    started = time.perf_counter()
    for round_index in range(rounds):
        clients = W.sample_clients(round_index)
        total = sum(len(parts[c]) for c in clients)
        new_state = {k: torch.zeros_like(v) for k, v in global_state.items()}
        for client in clients:
            model.load_state_dict(global_state)
            optimizer = torch.optim.SGD(model.parameters(), lr=W.LEARNING_RATE)
            indices = parts[client]
            for _ in range(W.LOCAL_EPOCHS):
                order = indices[torch.randperm(len(indices), generator=generator)].to(device)
                for batch in order.split(W.BATCH_SIZE):
                    optimizer.zero_grad()
                    F.cross_entropy(model(train_x[batch]), train_y[batch]).backward()
                    optimizer.step()
            weight = len(indices) / total
            for k, v in model.state_dict().items():
                new_state[k].add_(v, alpha=weight)
        global_state = new_state
        model.load_state_dict(global_state)
        loss, accuracy = W.evaluate(model, test_x, test_y)
    wall = time.perf_counter() - started
    W.emit({"wall_seconds": wall, "rounds": rounds, "final_accuracy": accuracy, "final_loss": loss,
            "startup_seconds": startup, "startup_cpu_seconds": startup_cpu, "warm_up_seconds": warm_up,
            "warm_up_cpu_seconds": warm_up_cpu})


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else W.ROUNDS, sys.argv[3] if len(sys.argv) > 3 else "cpu")
