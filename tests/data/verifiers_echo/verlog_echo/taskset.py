"""The echo taskset: ``num_tasks`` one-turn tasks "Repeat the word: <word>", scored by the reply."""

import verifiers.v1 as vf

WORDS = ("red", "blue", "green", "ball", "key", "door", "box", "left")


class EchoData(vf.TaskData):
    """One task's row: the word to repeat."""

    word: str = "red"


class EchoTask(vf.Task[EchoData]):
    """Asks for the word once; the reward reads the model's last reply."""

    @vf.reward(weight=1.0)
    async def echoed(self, trace: vf.Trace) -> float:
        """1.0 when the last reply contains the word (case-insensitive), else 0.0."""
        return float(self.data.word.lower() in (trace.last_reply or "").lower())


class EchoConfig(vf.TasksetConfig):
    """How many tasks the taskset builds."""

    num_tasks: int = 4


class EchoTaskset(vf.Taskset[EchoTask, EchoConfig]):
    """The echo tasks, words taken in order from ``WORDS``."""

    def load(self) -> list[EchoTask]:
        """One task per index below ``config.num_tasks``."""
        tasks = []
        for i in range(self.config.num_tasks):
            word = WORDS[i % len(WORDS)]
            tasks.append(EchoTask(EchoData(prompt=f"Repeat the word: {word}", word=word)))
        return tasks
