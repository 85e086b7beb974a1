"""Write examples/goals.jsonl: the example goal bank of ``python -m gen distractors``.

Each scenario below stands for one recorded script (someone in a kitchen with a dying plant,
someone finishing a run...) and lists the goals different people wrote for it: paraphrases
of one intent, sometimes as another action type, the way WAGIBench's repeats of a script
differ. A scenario is a ``group``. The goals were written by hand for this project across
WAGIBench's 10 action types; the script only gives them ids (32 hex, derived from the seed,
the group and the position) and shuffles the lines with the seed, so the file is reproducible:

    python examples/make_goals.py            # seed 0 -> examples/goals.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path
from typing import Any

G = dict[str, Any]


def s(query: str, item: str) -> G:
    return {"type": "search", "source": "world", "query": query, "query_item": item}


def tl(query: str, item: str) -> G:
    return {"type": "search", "source": "timeline", "query": query, "query_item": item}


def mem(content: str) -> G:
    return {"type": "store_memory", "content": content}


def rem(time: str, content: str) -> G:
    return {"type": "temporal_attention", "action": "set", "time": time, "content": content}


def unrem(time: str, content: str) -> G:
    return {"type": "temporal_attention", "action": "unset", "time": time, "content": content}


def guide(content: str, time: str) -> G:
    return {"type": "guided_activity", "content": content, "time": time}


def ctl(target: str, value: str) -> G:
    return {"type": "control_environment", "target": target, "value": value}


def msg(target: str, content: str) -> G:
    return {"type": "communication", "action": "message", "target": target, "content": content}


def share(target: str, content: str) -> G:
    return {"type": "communication", "action": "share", "target": target, "content": content}


def tr(modality: str, language: str) -> G:
    return {"type": "translate", "modality": modality, "src_language": language}


def go(to: str) -> G:
    return {"type": "find_directions", "to": to}


def buy(content: str) -> G:
    return {"type": "shop", "content": content}


def play(content: str) -> G:
    return {"type": "entertain", "modality": "audio", "content": content}


def watch(content: str) -> G:
    return {"type": "entertain", "modality": "vision", "content": content}


SCENARIOS: dict[str, list[G]] = {
    # ---- home and garden
    "dying_evergreen": [
        s("how to revive", "a dying evergreen"),
        s("why are the needles turning brown on", "my potted cypress"),
        s("how often to water", "an indoor evergreen shrub"),
    ],
    "repot_monstera": [
        s("how to repot", "a monstera without hurting the roots"),
        buy("large terracotta pot and potting mix"),
        s("best soil mix for", "monstera deliciosa"),
    ],
    "tomato_seedlings": [
        s("when to transplant", "tomato seedlings outdoors"),
        rem("in two weeks", "move the tomato seedlings outside"),
        s("how deep to plant", "tomato seedlings"),
    ],
    "basil_watering": [
        tl("when did I last water", "the basil on the windowsill"),
        mem("watered the basil today"),
        rem("every three days", "water the basil"),
    ],
    "lawn_mowing": [
        ctl("robot lawn mower", "start mowing the back yard"),
        ctl("lawn mower", "start"),
        s("best height to mow", "grass in early spring"),
    ],
    "compost_bin": [
        s("what can go into", "a backyard compost bin"),
        s("can I compost", "citrus peels"),
        s("how to stop fruit flies in", "my compost bin"),
    ],
    "leaky_faucet": [
        s("how to fix", "a dripping kitchen faucet"),
        watch("video on replacing a faucet cartridge"),
        buy("replacement faucet washer kit"),
    ],
    "clogged_drain": [
        s("how to unclog", "a bathroom sink drain without chemicals"),
        buy("drain snake"),
        s("baking soda and vinegar ratio for", "a clogged drain"),
    ],
    "smoke_detector_chirp": [
        s("why does my smoke detector keep chirping", "after changing the battery"),
        buy("9 volt batteries for the smoke detector"),
        rem("tonight at 8 pm", "replace the hallway smoke detector battery"),
    ],
    "laundry_stain": [
        s("how to get red wine out of", "a white cotton shirt"),
        s("how to remove", "a red wine stain from cotton"),
        s("does salt work on", "fresh wine stains"),
    ],
    "laundry_timer": [
        rem("in 45 minutes", "move the laundry to the dryer"),
        rem("45 minutes", "take the clothes out of the washer"),
        rem("in 40 minutes", "hang up the wet laundry"),
    ],
    "dishwasher_loading": [
        s("how to load", "a dishwasher so the glasses come out clean"),
        s("can I put", "cast iron in the dishwasher"),
        ctl("dishwasher", "start eco cycle"),
    ],
    "thermostat_evening": [
        ctl("living room thermostat", "21 degrees"),
        ctl("thermostat", "warmer, 22 C"),
        ctl("heating", "turn up to 21 degrees"),
    ],
    "bedroom_lights": [
        ctl("bedroom lights", "dim to 20%"),
        ctl("smart lights in the bedroom", "brightness: 20%"),
        ctl("bedside lamp", "warm white, low"),
    ],
    "kitchen_lights_off": [
        ctl("kitchen lights", "off"),
        ctl("downstairs lights", "off"),
        ctl("lights in the kitchen", "turn off"),
    ],
    "robot_vacuum": [
        ctl("robot vacuum", "clean the living room"),
        ctl("vacuum robot", "start cleaning"),
        ctl("robot vacuum", "return to dock"),
    ],
    "porch_camera": [
        ctl("front porch camera", "show live view"),
        tl("when was the last package delivered at", "the front door"),
        ctl("doorbell camera", "turn on motion alerts"),
    ],
    "garage_door": [
        ctl("garage door", "close"),
        ctl("garage door opener", "close the door"),
        tl("did I close", "the garage door this morning"),
    ],
    "fridge_inventory": [
        tl("what did I put in", "the fridge this week"),
        mem("there are two cartons of eggs in the fridge"),
        s("how long do cooked lentils keep in", "the fridge"),
    ],
    "grocery_list_milk": [
        mem("add oat milk to the grocery list"),
        buy("oat milk"),
        mem("we are out of oat milk"),
    ],
    "grocery_list_eggs": [
        mem("add eggs and butter to the grocery list"),
        buy("a dozen free range eggs"),
        mem("buy eggs next time I shop"),
    ],
    "hand_soap": [
        buy("hand soap refill"),
        buy("hand soap"),
        mem("add hand soap to the shopping list"),
    ],
    "toothpaste": [buy("toothpaste"), buy("whitening toothpaste"), mem("we need toothpaste")],
    "paper_towels": [
        buy("paper towels"),
        buy("a pack of kitchen roll"),
        mem("paper towels are almost gone"),
    ],
    "vitamins": [
        mem("I took my vitamins today"),
        tl("did I take", "my vitamins this morning"),
        rem("every day at 8 am", "take vitamin D"),
    ],
    "medication_refill": [
        rem("tomorrow morning", "call the pharmacy about my refill"),
        buy("refill of my allergy tablets"),
        tl("when did I last refill", "my allergy prescription"),
    ],
    "keys_location": [
        mem("my spare keys are in the blue bowl by the door"),
        tl("where did I leave", "my car keys"),
        mem("car keys are in my jacket pocket"),
    ],
    "parking_spot": [
        mem("I parked on level 3, row F"),
        mem("car is parked in spot 3F of the garage"),
        tl("where did I park", "the car today"),
    ],
    "passport_location": [
        mem("passport is in the top drawer of the desk"),
        tl("where did I put", "my passport"),
        mem("put the passports in the travel folder"),
    ],
    "bike_tire": [
        s("how to patch", "a bike inner tube"),
        watch("how to fix a flat bike tire"),
        buy("bike inner tube 700x28c"),
    ],
    "bike_ride_recording": [
        ctl("bike recording app", "start"),
        ctl("ride tracker", "start recording"),
        ctl("cycling app", "start a new ride"),
    ],
    "tent_setup": [
        watch("how to pitch a dome tent"),
        s("how to set up", "a two person dome tent"),
        s("tent pole order for", "the Coleman Sundome"),
    ],
    "ikea_shelf": [
        s("assembly instructions for", "IKEA Kallax shelf"),
        watch("Kallax assembly video"),
        s("which screws go where on", "the Kallax shelf"),
    ],
    "paint_bedroom": [
        s("how much paint do I need for", "a 12 by 14 foot bedroom"),
        buy("sage green interior paint, 2 gallons"),
        s("best paint finish for", "a bedroom wall"),
    ],
    "recycling_day": [
        tl("which week is", "recycling pickup"),
        rem("Sunday evening", "put the recycling bins out"),
        s("is pizza box cardboard recyclable in", "Seattle"),
    ],
    # ---- cooking and food
    "paella": [
        s("recipe for", "seafood paella"),
        s("how much saffron to use in", "paella for four"),
        guide("cooking seafood paella step by step", "45 minutes"),
    ],
    "sourdough": [
        s("how to feed", "a sourdough starter"),
        rem("in 8 hours", "feed the sourdough starter"),
        s("why is my sourdough", "so dense"),
    ],
    "pasta_timer": [
        rem("in 10 minutes", "drain the pasta"),
        rem("10 minutes", "take the pasta off the stove"),
        rem("in nine minutes", "check the spaghetti"),
    ],
    "steak_doneness": [
        s("internal temperature for", "medium rare steak"),
        s("how long to rest", "a ribeye after grilling"),
        s("how long to cook", "a one inch steak on each side"),
    ],
    "banana_bread": [
        s("recipe for", "banana bread with overripe bananas"),
        guide("baking banana bread", "one hour"),
        s("can I freeze", "banana bread"),
    ],
    "egg_substitute": [
        s("what can I use instead of", "eggs in pancakes"),
        s("egg substitute for", "baking muffins"),
        s("how to make a flax egg for", "vegan baking"),
    ],
    "apple_nutrition": [
        s("nutritional content of", "a red delicious apple"),
        s("how many calories are in", "a medium apple"),
        s("how much fiber is in", "an apple with the skin"),
    ],
    "coffee_machine": [
        ctl("coffee machine", "brew a large americano"),
        ctl("espresso machine", "start preheating"),
        s("how to descale", "a Nespresso machine"),
    ],
    "meal_prep": [
        guide("meal prepping lunches for the week", "one hour"),
        s("easy high protein", "meal prep ideas"),
        mem("made five lunches for the week: chicken, rice and broccoli"),
    ],
    "wine_pairing": [
        s("which wine goes with", "mushroom risotto"),
        s("wine pairing for", "salmon"),
        buy("a bottle of pinot noir"),
    ],
    "restaurant_reservation": [
        msg("La Trattoria", "table for four at 7:30 on Friday, please"),
        tl("what time is", "our dinner reservation"),
        s("opening hours of", "La Trattoria tonight"),
    ],
    "takeout_order": [
        buy("pad thai and spring rolls for delivery"),
        buy("thai takeout"),
        s("thai restaurants that deliver", "near me"),
    ],
    "calorie_log": [
        mem("had a turkey sandwich and an apple for lunch"),
        mem("lunch: turkey sandwich, 450 calories"),
        tl("how many calories did I eat", "today"),
    ],
    # ---- fitness and health
    "post_run_stretch": [
        guide("a post run stretching routine", "ten minutes"),
        guide("stretches for tight hamstrings after running", "10 minutes"),
        watch("cool down stretches after a run"),
    ],
    "elliptical_workout": [
        guide("an interval workout on the elliptical", "30 minutes"),
        ctl("fitness tracker", "start elliptical workout"),
        play("high energy workout playlist"),
    ],
    "morning_yoga": [
        guide("a beginner morning yoga flow", "15 minutes"),
        guide("gentle yoga for a stiff back", "fifteen minutes"),
        watch("15 minute morning yoga video"),
    ],
    "meditation": [
        guide("guided meditation", "ten minutes"),
        guide("a breathing exercise to calm down", "five minutes"),
        play("calm meditation music"),
    ],
    "sleep_routine": [
        guide("a body scan to fall asleep", "20 minutes"),
        play("rain sounds for sleeping"),
        ctl("bedroom lights", "turn off in 20 minutes"),
    ],
    "pushup_count": [
        mem("did 3 sets of 20 push-ups today"),
        tl("how many push-ups did I do", "last week"),
        mem("push-up record: 35 in one set"),
    ],
    "gym_bag": [
        rem("tomorrow at 6 am", "pack the gym bag"),
        mem("left my gym towel in locker 42"),
        rem("before leaving work", "grab the gym bag"),
    ],
    "water_intake": [
        mem("drank two liters of water today"),
        rem("every hour", "drink a glass of water"),
        tl("how much water did I drink", "yesterday"),
    ],
    "knee_pain": [
        s("why does my knee hurt when", "I go down stairs"),
        s("exercises for", "runner's knee"),
        guide("knee strengthening exercises", "15 minutes"),
    ],
    "blood_pressure": [
        mem("blood pressure this morning: 122 over 80"),
        tl("what was my blood pressure", "last Monday"),
        mem("log blood pressure 118/79"),
    ],
    "doctor_appointment": [
        tl("when is", "my next doctor's appointment"),
        rem("the day before", "the dentist appointment"),
        msg("Dr. Patel's office", "I need to move my Thursday appointment"),
    ],
    # ---- work, study and errands
    "tax_filing": [
        s("how to file", "my taxes online for the first time"),
        s("deadline to file", "income taxes this year"),
        rem("this Saturday", "gather the documents for my tax return"),
    ],
    "printer_ink": [
        buy("black ink cartridge for the HP printer"),
        buy("printer ink"),
        s("why is my printer printing", "streaks"),
    ],
    "wifi_reset": [
        ctl("wifi router", "restart"),
        ctl("router", "reboot"),
        s("why does my wifi keep", "dropping in the evening"),
    ],
    "slides_deadline": [
        rem("Thursday at noon", "finish the quarterly review slides"),
        msg("Priya", "can we push the slide review to Friday?"),
        tl("when is the deadline for", "the quarterly slides"),
    ],
    "meeting_notes": [
        mem("action items from the standup: update the roadmap, email vendor"),
        share("team channel", "the notes from today's standup"),
        mem("the vendor meeting moved to next Tuesday"),
    ],
    "late_to_meeting": [
        msg("Sam", "running 10 minutes late, start without me"),
        msg("the team", "I'll be five minutes late to the meeting"),
        go("the office on 5th Avenue"),
    ],
    "spanish_homework": [
        s("conjugation of", "the verb tener in the preterite"),
        s("spanish grammar exercises for", "elementary school"),
        tr("text", "Spanish"),
    ],
    "book_report": [
        s("summary of", "Don Quixote part one"),
        s("main themes of", "The Shadow of the Wind"),
        mem("finished chapter 12 of The Shadow of the Wind"),
    ],
    "library_due": [
        tl("when are", "my library books due"),
        rem("Friday", "return the library books"),
        rem("in three days", "bring the books back to the library"),
    ],
    "package_return": [
        go("the nearest UPS drop off"),
        rem("tomorrow", "drop off the return package"),
        tl("when is the return deadline for", "the jacket I ordered"),
    ],
    "post_office": [
        go("the post office"),
        s("opening hours of", "the post office on Main Street"),
        go("nearest post office"),
    ],
    "bank_branch": [
        go("the closest Chase branch"),
        s("is there a cash machine", "near here"),
        go("nearest ATM"),
    ],
    "car_service": [
        rem("next Monday", "book the car in for its oil change"),
        tl("when did I last change", "the car's oil"),
        s("how often to change", "synthetic oil"),
    ],
    "tire_pressure": [
        s("recommended tire pressure for", "a 2018 Honda Civic"),
        go("gas station with an air pump"),
        mem("topped up the tires to 32 psi"),
    ],
    "gas_station": [
        go("the cheapest gas station nearby"),
        go("nearest gas station"),
        s("gas prices", "near me"),
    ],
    "ev_charging": [
        go("nearest EV fast charger"),
        s("how long to charge", "a Tesla Model 3 at a supercharger"),
        ctl("car charger", "start charging"),
    ],
    # ---- travel and getting around
    "airport_trip": [
        go("SeaTac airport departures"),
        s("how early should I get to the airport for", "an international flight"),
        tl("what time is", "my flight on Friday"),
    ],
    "flight_status": [
        s("flight status of", "AS 331 to Boston"),
        s("is my flight delayed", "AS 331"),
        tl("which gate is", "my flight boarding from"),
    ],
    "hotel_checkin": [
        tl("what time can I check in to", "my hotel"),
        go("the Marriott downtown"),
        s("check-in time at", "the Hilton Garden Inn"),
    ],
    "train_tickets": [
        buy("two train tickets to Portland on Saturday"),
        s("train times from Seattle to", "Portland this weekend"),
        go("King Street Station"),
    ],
    "bus_stop": [
        go("the nearest bus stop for the 44"),
        s("when is the next bus", "to the university"),
        go("bus stop"),
    ],
    "museum_visit": [
        s("opening hours of", "the Museum of Pop Culture"),
        buy("tickets to the art museum for Saturday"),
        go("the Seattle Art Museum"),
    ],
    "menu_german": [
        tr("text", "German"),
        tr("text", "german"),
        s("what does", "Schweinshaxe mean"),
    ],
    "menu_japanese": [tr("text", "Japanese"), s("what is", "okonomiyaki"), tr("text", "japanese")],
    "street_sign_french": [
        tr("text", "French"),
        tr("text", "french"),
        s("what does", "stationnement interdit mean"),
    ],
    "conversation_spanish": [
        tr("audio", "Spanish"),
        tr("audio", "spanish"),
        s("how do you say", "where is the bathroom in Spanish"),
    ],
    "conversation_italian": [
        tr("audio", "Italian"),
        tr("audio", "italian"),
        s("how to say", "thank you very much in Italian"),
    ],
    "announcement_mandarin": [
        tr("audio", "Mandarin"),
        tr("audio", "Chinese"),
        tr("audio", "mandarin chinese"),
    ],
    "packing_list": [
        mem("pack the charger, passport and sunscreen"),
        mem("add swimsuit to the packing list"),
        tl("what is on", "my packing list for the beach trip"),
    ],
    "weather_hike": [
        s("weather forecast for", "Mount Rainier this Saturday"),
        s("will it rain at", "Mount Si tomorrow morning"),
        s("trail conditions at", "Rattlesnake Ledge"),
    ],
    "trailhead": [
        go("Mount Si trailhead"),
        go("the trailhead parking lot"),
        go("Rattlesnake Ledge trailhead"),
    ],
    "umbrella": [
        s("will it rain", "this afternoon"),
        s("weather forecast", "for today"),
        s("chance of rain", "at 5 pm"),
    ],
    # ---- people and messages
    "mom_birthday": [
        msg("Mom", "Happy birthday! Can't wait to see you Sunday"),
        buy("birthday flowers for Mom"),
        rem("Saturday morning", "call Mom for her birthday"),
    ],
    "dinner_plans": [
        msg("Alex", "are we still on for dinner at 7?"),
        msg("Alex", "dinner tonight still good?"),
        tl("what time is", "dinner with Alex"),
    ],
    "running_late_pickup": [
        msg("Jordan", "stuck in traffic, I'll pick you up at 5:20"),
        msg("Jordan", "running late for pickup"),
        go("Lincoln Elementary School"),
    ],
    "share_hike_photo": [
        share("Instagram", "the photo from the top of the trail"),
        share("the family group chat", "our hiking photos"),
        share("Instagram", "today's summit selfie"),
    ],
    "share_recipe": [
        share("Maria", "the banana bread recipe"),
        msg("Maria", "here's the recipe I promised"),
        share("the cooking group", "my paella recipe"),
    ],
    "game_night": [
        msg("game night group", "Clue Rivals Edition at my place Friday at 7?"),
        s("how to play", "Clue Rivals Edition"),
        s("rules of", "Cards Against Humanity"),
    ],
    "movie_night": [
        s("nearby movie times for", "Inside Out 2"),
        buy("two tickets for Inside Out 2 tonight"),
        msg("Caleb", "want to see Inside Out 2 on Wednesday?"),
    ],
    "thank_you_note": [
        msg("Grandma", "thank you so much for the sweater!"),
        msg("Grandma", "thanks for the birthday gift"),
        rem("tonight", "write a thank you card to Grandma"),
    ],
    "dog_walker": [
        msg("Taylor", "can you walk Biscuit at noon tomorrow?"),
        msg("the dog walker", "please walk Biscuit around noon"),
        rem("at noon", "walk the dog"),
    ],
    "dog_training": [
        s("how to train", "a dog to sit"),
        watch("puppy training videos"),
        s("how to stop a puppy", "from biting"),
    ],
    "cat_food": [
        buy("grain free cat food"),
        buy("cat food"),
        mem("the cat is on the salmon flavour food now"),
    ],
    "vet_visit": [
        tl("when is", "Biscuit's vet appointment"),
        go("the animal hospital on Elm Street"),
        rem("in the morning", "give the dog his heartworm pill"),
    ],
    "baby_bottle": [
        rem("in three hours", "feed the baby"),
        mem("baby drank 120 ml at 2 pm"),
        tl("when did the baby last", "eat"),
    ],
    "kids_pickup": [
        rem("at 3:15", "pick up the kids from school"),
        go("the kids' school"),
        rem("3 pm", "leave to get the kids"),
    ],
    # ---- entertainment and media
    "rock_playlist": [play("rock playlist"), play("classic rock"), play("some 80s rock")],
    "jazz_dinner": [play("smooth jazz for dinner"), play("jazz"), play("relaxing jazz playlist")],
    "podcast_commute": [
        play("the latest episode of my news podcast"),
        play("a podcast for the drive"),
        play("next episode of the true crime podcast"),
    ],
    "audiobook": [
        play("my audiobook"),
        play("the next chapter of Project Hail Mary"),
        play("audiobook where I left off"),
    ],
    "cat_videos": [
        watch("cat videos"),
        watch("funny cat compilations"),
        watch("cute kitten videos"),
    ],
    "cooking_show": [
        watch("the new episode of the baking show"),
        watch("a cooking show"),
        watch("Great British Bake Off"),
    ],
    "movie_trailer": [
        watch("Inside Out 2 trailer"),
        watch("the trailer for Dune Part Two"),
        s("release date of", "Dune Part Two on streaming"),
    ],
    "football_score": [
        s("live score of", "the Seahawks game"),
        s("who won", "the Seahawks game last night"),
        watch("Seahawks highlights"),
    ],
    "tv_volume": [
        ctl("TV", "volume down"),
        ctl("living room TV", "mute"),
        ctl("soundbar", "volume 15"),
    ],
    "tv_off": [
        ctl("TV", "turn off"),
        ctl("television", "off"),
        ctl("TV", "sleep timer 30 minutes"),
    ],
    "speaker_music": [
        ctl("kitchen speaker", "play music"),
        play("my morning playlist on the kitchen speaker"),
        ctl("speaker", "volume up"),
    ],
    "gaming_limit": [
        rem("1:00:00", "stop gaming"),
        rem("in one hour", "stop playing video games"),
        rem("in an hour", "turn off the console"),
    ],
    "uplifting_videos": [
        watch("uplifting dog videos"),
        watch("feel good videos"),
        watch("videos of dogs reuniting with owners"),
    ],
    "guitar_practice": [
        watch("how to play flamenco guitar for beginners"),
        guide("guitar scales practice", "20 minutes"),
        s("chords for", "Wonderwall"),
    ],
    "piano_practice": [
        guide("piano practice with a metronome", "30 minutes"),
        rem("30 minutes", "stop piano practice"),
        watch("easy piano tutorial for Clair de Lune"),
    ],
    "crossword": [
        s("crossword clue", "greek letter, three letters"),
        s("synonym for", "happy, seven letters"),
        s("what is a five letter word for", "brave"),
    ],
    "fact_check": [
        s("fact check: did", "Henry Cavill star in Man of Steel"),
        s("who played Superman in", "Man of Steel"),
        s("cast of", "Man of Steel"),
    ],
    "bird_identify": [
        s("what bird is", "small with a red head and black wings"),
        s("identify bird", "red crest, grey body"),
        mem("saw a northern cardinal in the backyard"),
    ],
    "plant_identify": [
        s("what plant has", "heart shaped leaves with white stripes"),
        s("is this plant toxic to cats", "pothos"),
        s("identify houseplant", "with long striped leaves"),
    ],
    "stargazing": [
        s("what constellation is", "visible in the south tonight"),
        s("when is the next", "meteor shower"),
        rem("at 11 pm", "go outside for the meteor shower"),
    ],
    # ---- shopping
    "running_shoes": [
        buy("running shoes"),
        buy("Brooks Ghost running shoes size 10"),
        s("best running shoes for", "flat feet"),
    ],
    "winter_jacket": [
        buy("a waterproof winter jacket"),
        buy("down jacket"),
        s("warmest", "winter jackets under 200 dollars"),
    ],
    "phone_charger": [
        buy("USB-C phone charger"),
        buy("fast charging cable"),
        go("the nearest electronics store"),
    ],
    "birthday_gift_kid": [
        buy("LEGO set for a seven year old"),
        s("best gifts for", "a seven year old who likes dinosaurs"),
        buy("dinosaur puzzle"),
    ],
    "light_bulbs": [
        buy("E26 LED light bulbs, warm white"),
        buy("light bulbs"),
        mem("the hallway bulb is out"),
    ],
    "coffee_beans": [
        buy("whole bean dark roast coffee"),
        buy("coffee beans"),
        mem("almost out of coffee beans"),
    ],
    "price_compare": [
        s("price of", "AirPods Pro at other stores"),
        s("is there a cheaper price for", "this blender online"),
        s("reviews of", "the Ninja blender"),
    ],
    # ---- reminders and memories
    "trash_night": [
        rem("Tuesday at 8 pm", "take out the trash"),
        rem("tonight", "put the bins out"),
        unrem("Tuesday at 8 pm", "take out the trash"),
    ],
    "cancel_alarm": [
        unrem("6:30 am", "wake up for the gym"),
        unrem("tomorrow 6:30", "go to the gym"),
        unrem("", "do the morning workout"),
    ],
    "oven_timer": [
        rem("in 25 minutes", "take the lasagna out of the oven"),
        rem("25 minutes", "check the lasagna"),
        rem("in 20 minutes", "take the cookies out"),
    ],
    "tea_steeping": [
        rem("in 4 minutes", "take out the tea bag"),
        rem("three minutes", "remove the tea leaves"),
        rem("in 5 minutes", "pour the green tea"),
    ],
    "plant_fertilizer": [
        rem("every two weeks", "fertilize the houseplants"),
        mem("fertilized the fiddle leaf fig today"),
        tl("when did I last fertilize", "the fiddle leaf fig"),
    ],
    "bills": [
        rem("on the 1st", "pay the rent"),
        rem("Friday", "pay the electricity bill"),
        tl("did I pay", "the water bill this month"),
    ],
    "birthday_party_memory": [
        mem("Lena's birthday party is at the climbing gym on the 14th"),
        tl("when is", "Lena's birthday party"),
        rem("the day before", "buy a present for Lena's party"),
    ],
    "wifi_password": [
        mem("the guest wifi password is on the fridge"),
        tl("what is", "the guest wifi password"),
        share("Sam", "the guest wifi password"),
    ],
    "new_neighbor": [
        mem("the new neighbour at number 12 is called Daniel"),
        tl("what is the name of", "the neighbour at number 12"),
        mem("Daniel next door has a golden retriever called Max"),
    ],
}


def goal_id(seed: int, group: str, k: int) -> str:
    return hashlib.sha256(f"goal/{seed}/{group}/{k}".encode()).hexdigest()[:32]


def rows(seed: int) -> list[dict[str, Any]]:
    out = [
        {"goal_id": goal_id(seed, group, k), "group": group, "goal": g}
        for group, goals in SCENARIOS.items()
        for k, g in enumerate(goals)
    ]
    random.Random(seed).shuffle(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("goals.jsonl"))
    args = parser.parse_args()
    lines = [json.dumps(r, ensure_ascii=False) for r in rows(args.seed)]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines)} goals in {len(SCENARIOS)} groups -> {args.out}")


if __name__ == "__main__":
    main()
