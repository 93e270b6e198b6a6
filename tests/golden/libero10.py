"""The ten ``libero_10`` (LIBERO-Long) tasks' language instructions, as LIBERO's benchmark gives
them, in task-id order: the inputs the golden-file scripts beside this file feed the authors' code.
Plain data, no imports, so those scripts can use it from their own environments."""

LIBERO_10_INSTRUCTIONS = [
    "put both the alphabet soup and the tomato sauce in the basket",
    "put both the cream cheese box and the butter in the basket",
    "turn on the stove and put the moka pot on it",
    "put the black bowl in the bottom drawer of the cabinet and close it",
    "put the white mug on the left plate and put the yellow and white mug on the right plate",
    "pick up the book and place it in the back compartment of the caddy",
    "put the white mug on the plate and put the chocolate pudding to the right of the plate",
    "put both the alphabet soup and the cream cheese box in the basket",
    "put both moka pots on the stove",
    "put the yellow and white mug in the microwave and close it",
]
