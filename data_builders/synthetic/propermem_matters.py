"""The matters of the synthetic ProPerMem-style set: what the target evidence says, what the clip shows.

Three kinds, each aimed at one pathway so that the retrievers are complementary and none is
trivially perfect (``data_builders.synthetic.propermem`` adds lures that share the cue's or the evidence's words):

- ``paraphrase``: the evidence and the current caption concern the same thing in other words,
  while lures repeat the caption's wording (dense similarity should link them; word overlap is
  lured away).
- ``entity``: an alias caption (``Marco is my landlord``) plus an instruction that names only the
  role (``the landlord told me ...``); the clip names the person. Only the relation links them.
- ``visual``: the evidence caption does not name what the clip shows; an object visible in both
  keyframes (not in the clip's caption) is the only link.

Each matter: ``evidence`` (list of captions), ``cue`` (the clip caption just before the window),
``response`` (the reminder), ``lures`` (distractor captions sharing words), and for ``visual`` the
hidden ``object`` and the ``place`` of both keyframes.
"""

from __future__ import annotations

PARAPHRASE = [
    dict(
        evidence=["I sniffed the milk in the fridge and it had gone sour."],
        cue="I pour milk from the fridge into my cereal bowl.",
        response="That milk went sour: do not pour it on your cereal.",
        lures=["I pour juice from the fridge into a glass.", "I pour cereal into my bowl at the table."],
    ),
    dict(
        evidence=["The clerk said my passport expires in March and must be renewed before I travel abroad."],
        cue="I book a flight abroad for a holiday in April.",
        response="Your passport expires in March: renew it before this trip.",
        lures=["I book a table for dinner on my laptop.", "I read about holiday ideas on my laptop."],
    ),
    dict(
        evidence=["The bike shop showed me a deep crack in the rear tyre of my bicycle."],
        cue="I pump up the tyres of my bicycle before a long ride.",
        response="The rear tyre is cracked: do not ride it far.",
        lures=[
            "I pump up the football before the match in the park.",
            "I clean the chain of my bicycle in the garage.",
        ],
    ),
    dict(
        evidence=["The doctor told me I am allergic to shellfish after my throat swelled at dinner."],
        cue="At the restaurant I order a plate of prawns and mussels.",
        response="Careful: prawns and mussels are shellfish.",
        lures=[
            "At the restaurant I order a salad and water from the waiter.",
            "I order a new plate online for the kitchen.",
        ],
    ),
    dict(
        evidence=["The gardener said the fern dies if it sits in direct sunlight."],
        cue="I move the fern onto the sunny windowsill.",
        response="That fern dies in direct sun: keep it off the sunny windowsill.",
        lures=["I move the lamp onto the windowsill in the living room.", "I water the fern in the hallway."],
    ),
    dict(
        evidence=[
            "The repair man warned that the oven door glass is cracked and may shatter if the oven gets very hot."
        ],
        cue="I turn the oven up to its hottest setting for the pizza.",
        response="The oven door glass is cracked: do not heat it that high.",
        lures=["I turn the grill on for the sausages.", "I order a pizza for the evening with Tom."],
    ),
    dict(
        evidence=["I left my umbrella under my desk at the office."],
        cue="Rain is forecast, and I look for my umbrella before going out.",
        response="Your umbrella is still under your desk at the office.",
        lures=[
            "I hang my coat on the hook in the hallway after the rain.",
            "I look for my keys before going out.",
        ],
    ),
    dict(
        evidence=["The vet said the dog must never eat grapes or raisins."],
        cue="I give the dog a handful of raisins from my snack.",
        response="Raisins are toxic for the dog: do not give them.",
        lures=["I give the dog a biscuit in the park.", "I eat a handful of nuts from my snack bowl."],
    ),
]

ENTITY = [
    (
        "Marco",
        "landlord",
        "The landlord told me to keep the boiler pressure below two bar or it will leak.",
        "Marco sends me a text while I stand next to the boiler in the hallway.",
        "Keep the boiler below two bar, as your landlord said.",
    ),
    (
        "Dana",
        "dentist",
        "The dentist said to use only the soft toothbrush because the hard one hurts my gums.",
        "Dana waves at me in the pharmacy as I pick a toothbrush from the shelf.",
        "Take a soft toothbrush, as your dentist said.",
    ),
    (
        "Kenji",
        "coach",
        "The coach insisted I wear the knee brace on every run longer than five kilometres.",
        "Kenji jogs past as I lace up my shoes for a long run by the river.",
        "Wear the knee brace for this long run, as your coach asked.",
    ),
    (
        "Omar",
        "pharmacist",
        "The pharmacist said the new pills must be taken with food, never on an empty stomach.",
        "Omar calls to ask how I am while I take the pills out before breakfast.",
        "Eat something first: those pills must be taken with food.",
    ),
    (
        "Sofia",
        "manager",
        "The manager asked me to back up the quarterly report to the shared drive every Friday.",
        "Sofia appears on the video call while I edit the report on Friday afternoon.",
        "It is Friday: back up the quarterly report to the shared drive.",
    ),
    (
        "Chen",
        "mechanic",
        "The mechanic said the car needs an oil change before the next long drive.",
        "Chen waves from across the street as I load suitcases into the car for a long drive.",
        "The car needs an oil change before this long drive.",
    ),
    (
        "Lena",
        "neighbour",
        "The neighbour asked me to feed her cat only the dry food in the blue tin.",
        "Lena texts me from the airport while I open a can of tuna for the cat.",
        "Lena's cat gets only the dry food in the blue tin.",
    ),
    (
        "Aisha",
        "sister",
        "My sister said the orchid needs only a little water once a week.",
        "Aisha phones me as I fill the watering can next to the orchid.",
        "Only a little water: the orchid needs it once a week.",
    ),
]

VISUAL = [
    (
        "ceramic frog",
        "hallway",
        "I slip the spare key inside and close the lid.",
        "I come home and drop my bag in the hallway.",
        "The spare key is inside the ceramic frog.",
    ),
    (
        "grey filing box",
        "office",
        "I tuck the warranty papers in there behind the folders.",
        "I sit down at my desk to sort the post.",
        "The warranty papers are in the grey filing box.",
    ),
    (
        "wicker chest",
        "bedroom",
        "I hide the birthday present under the blankets in there.",
        "I make the bed and fold the laundry.",
        "The birthday present is in the wicker chest.",
    ),
    (
        "red toolbox",
        "garage",
        "I put the spare fuses in its small top drawer.",
        "I walk into the garage to look at the car lights.",
        "The spare fuses are in the red toolbox.",
    ),
    (
        "biscuit tin",
        "kitchen",
        "I put the emergency cash under the lid and push it to the back.",
        "I wipe the counter and put the shopping away in the kitchen.",
        "The emergency cash is in the biscuit tin.",
    ),
    (
        "green backpack",
        "bedroom",
        "I zip the passport into the inner pocket of it.",
        "I pack clothes for the weekend trip in the bedroom.",
        "Your passport is in the green backpack.",
    ),
    (
        "blue vase",
        "living room",
        "I drop the spare remote batteries inside it.",
        "I sit on the sofa and the remote stops working.",
        "The spare batteries are in the blue vase.",
    ),
    (
        "cork board",
        "office",
        "I pin the parking permit behind the calendar there.",
        "I grab my car keys from the office desk before driving into town.",
        "The parking permit is pinned on the cork board.",
    ),
]
