"""A game of one's own for Verlog: guess a secret number, told "higher" or "lower" after each guess."""

from verlog.envs import TextEnv, register


class GuessNumber(TextEnv):
    """The secret is drawn from 1..high at reset (reproducible from the reset seed); a right guess
    ends the episode with reward 1."""

    default_action = "guess 1"  # executed when a reply holds no valid action

    def __init__(self, *, high: int = 8, max_steps: int | None = 6, format_penalty: float = 0.0):
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
        self.high = high
        self.fixed_actions = tuple(f"guess {k}" for k in range(1, high + 1))
        self._instruction = f"Guess the secret number between 1 and {high}. Reply ACTION: guess <number>."
        self._secret, self._solved = 0, False

    def _reset_game(self, seed):
        self._secret = int(self.np_random.integers(1, self.high + 1))  # TextEnv.reset seeded np_random
        self._solved = False
        return "Make your first guess.", {}

    def _step_game(self, action):
        guess = int(action.split()[1])
        self._solved = guess == self._secret
        hint = "Right!" if self._solved else ("Higher." if guess < self._secret else "Lower.")
        return f"You guessed {guess}. {hint}", float(self._solved), self._solved, False, {}

    @property
    def progression(self) -> float:
        return 1.0 if self._solved else 0.0


def register_all() -> None:
    """The plugin hook: an entry point in the group verlog.envs named "guess" points here."""
    register("guess/number", GuessNumber, replace=True)
    register("guess/number_16", lambda **kw: GuessNumber(high=16, **kw), replace=True)
